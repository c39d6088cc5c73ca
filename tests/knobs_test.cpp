// The environment knobs (runtime/base/knobs.h): each variable's values are read into the struct,
// an empty or unset one is the default, a value it does not take is refused naming the variable,
// the value and what it takes; the header text names every knob; configure_knobs sets what the
// next model's placement carries and the kernels' process-wide settings (the CPU ISA flag).
#include "runtime/base/knobs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kernels/parallel.h"
#include "runtime/base/error.h"
#include "runtime/model/model.h"

namespace lockstep {
namespace {

const char* const kNames[] = {
    "LOCKSTEP_CPU_CONV",          "LOCKSTEP_CUDA_CONV",      "LOCKSTEP_CUDNN_DETERMINISTIC",
    "LOCKSTEP_CPU_ISA",           "LOCKSTEP_CUDA_ATTENTION", "LOCKSTEP_CPU_ATTENTION",
    "LOCKSTEP_CUDA_GELU",         "LOCKSTEP_CUDA_LOGITS",    "LOCKSTEP_CUDA_CONV_POOL",
    "LOCKSTEP_CUDA_BF16_WEIGHTS", "LOCKSTEP_CPU_LANES"};

// Clears the knobs' variables for a test and puts back what the process had.
class KnobsTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : kNames) {
      const char* v = std::getenv(n);
      saved_.push_back(v != nullptr ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(n);
    }
    configured_ = configured_knobs();
  }
  void TearDown() override {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i])
        setenv(kNames[i], saved_[i]->c_str(), 1);
      else
        unsetenv(kNames[i]);
    }
    configure_knobs(configured_);
  }
  std::vector<std::optional<std::string>> saved_;
  Knobs configured_;
};

TEST_F(KnobsTest, UnsetOrEmptyIsTheDefault) {
  const Knobs k = knobs_from_environment();
  EXPECT_EQ(k.cpu_conv, CpuConvKnob::automatic);
  EXPECT_EQ(k.cuda_conv, CudaConvKnob::any);
  EXPECT_TRUE(k.cudnn_deterministic);
  EXPECT_EQ(k.cpu_isa, CpuIsaKnob::native);
  EXPECT_EQ(k.cuda_attention, AttentionKnob::flash);
  EXPECT_EQ(k.cpu_attention, AttentionKnob::flash);
  EXPECT_EQ(k.cuda_gelu, GeluKnob::kernel);
  EXPECT_EQ(k.cuda_logits, LogitsKnob::f32);
  EXPECT_EQ(k.cuda_conv_pool, ConvPoolKnob::unfused);
  EXPECT_EQ(k.cuda_bf16_weights, Bf16WeightsKnob::update);
  EXPECT_TRUE(k.cpu_lanes);
  for (const char* n : kNames) setenv(n, "", 1);
  EXPECT_EQ(knobs_text(knobs_from_environment()), knobs_text(k));
  EXPECT_EQ(knobs_text(k),
            "LOCKSTEP_CPU_CONV=auto LOCKSTEP_CUDA_CONV=any LOCKSTEP_CUDNN_DETERMINISTIC=1 "
            "LOCKSTEP_CPU_ISA=native LOCKSTEP_CUDA_ATTENTION=flash LOCKSTEP_CPU_ATTENTION=flash "
            "LOCKSTEP_CUDA_GELU=kernel LOCKSTEP_CUDA_LOGITS=fp32 LOCKSTEP_CUDA_CONV_POOL=unfused "
            "LOCKSTEP_CUDA_BF16_WEIGHTS=update LOCKSTEP_CPU_LANES=auto");
}

TEST_F(KnobsTest, EveryValueIsRead) {
  setenv("LOCKSTEP_CPU_CONV", "direct", 1);
  setenv("LOCKSTEP_CUDA_CONV", "im2col", 1);
  setenv("LOCKSTEP_CUDNN_DETERMINISTIC", "0", 1);
  setenv("LOCKSTEP_CPU_ISA", "baseline", 1);
  setenv("LOCKSTEP_CUDA_ATTENTION", "materialised", 1);
  setenv("LOCKSTEP_CPU_ATTENTION", "materialised", 1);
  setenv("LOCKSTEP_CUDA_GELU", "epilogue", 1);
  setenv("LOCKSTEP_CUDA_LOGITS", "bf16", 1);
  setenv("LOCKSTEP_CUDA_CONV_POOL", "fused", 1);
  setenv("LOCKSTEP_CUDA_BF16_WEIGHTS", "forward", 1);
  setenv("LOCKSTEP_CPU_LANES", "off", 1);
  Knobs k = knobs_from_environment();
  EXPECT_EQ(k.cpu_conv, CpuConvKnob::direct);
  EXPECT_EQ(k.cuda_conv, CudaConvKnob::im2col);
  EXPECT_FALSE(k.cudnn_deterministic);
  EXPECT_EQ(k.cpu_isa, CpuIsaKnob::baseline);
  EXPECT_EQ(k.cuda_attention, AttentionKnob::materialised);
  EXPECT_EQ(k.cpu_attention, AttentionKnob::materialised);
  EXPECT_EQ(k.cuda_gelu, GeluKnob::epilogue);
  EXPECT_EQ(k.cuda_logits, LogitsKnob::bf16);
  EXPECT_EQ(k.cuda_conv_pool, ConvPoolKnob::fused);
  EXPECT_EQ(k.cuda_bf16_weights, Bf16WeightsKnob::forward);
  EXPECT_FALSE(k.cpu_lanes);
  EXPECT_EQ(
      knobs_text(k),
      "LOCKSTEP_CPU_CONV=direct LOCKSTEP_CUDA_CONV=im2col LOCKSTEP_CUDNN_DETERMINISTIC=0 "
      "LOCKSTEP_CPU_ISA=baseline LOCKSTEP_CUDA_ATTENTION=materialised "
      "LOCKSTEP_CPU_ATTENTION=materialised LOCKSTEP_CUDA_GELU=epilogue "
      "LOCKSTEP_CUDA_LOGITS=bf16 LOCKSTEP_CUDA_CONV_POOL=fused LOCKSTEP_CUDA_BF16_WEIGHTS=forward "
      "LOCKSTEP_CPU_LANES=off");
  setenv("LOCKSTEP_CPU_CONV", "onednn", 1);
  setenv("LOCKSTEP_CUDA_CONV", "cudnn", 1);
  k = knobs_from_environment();
  EXPECT_EQ(k.cpu_conv, CpuConvKnob::onednn);
  EXPECT_EQ(k.cuda_conv, CudaConvKnob::cudnn);
  setenv("LOCKSTEP_CPU_ISA", "avx2", 1);
  EXPECT_EQ(knobs_from_environment().cpu_isa, CpuIsaKnob::avx2);
  // cuDNN's fused attention is a GPU choice only: the CPU knob refuses it.
  setenv("LOCKSTEP_CUDA_ATTENTION", "cudnn", 1);
  k = knobs_from_environment();
  EXPECT_EQ(k.cuda_attention, AttentionKnob::cudnn);
  EXPECT_NE(knobs_text(k).find("LOCKSTEP_CUDA_ATTENTION=cudnn "), std::string::npos);
  setenv("LOCKSTEP_CPU_ATTENTION", "cudnn", 1);
  EXPECT_THROW(knobs_from_environment(), UsageError);
}

TEST_F(KnobsTest, AValueNotTakenIsRefusedInWords) {
  const std::pair<const char*, const char*> cases[] = {
      {"LOCKSTEP_CPU_CONV", "expected auto, onednn or direct"},
      {"LOCKSTEP_CUDA_CONV", "expected cudnn or im2col"},
      {"LOCKSTEP_CUDNN_DETERMINISTIC", "expected 0 or 1"},
      {"LOCKSTEP_CPU_ISA", "expected native, avx2 or baseline"},
      {"LOCKSTEP_CUDA_ATTENTION", "expected flash, cudnn or materialised"},
      {"LOCKSTEP_CPU_ATTENTION", "expected flash or materialised"},
      {"LOCKSTEP_CUDA_GELU", "expected kernel or epilogue"},
      {"LOCKSTEP_CUDA_LOGITS", "expected fp32 or bf16"},
      {"LOCKSTEP_CUDA_CONV_POOL", "expected unfused or fused"},
      {"LOCKSTEP_CUDA_BF16_WEIGHTS", "expected update or forward"},
      {"LOCKSTEP_CPU_LANES", "expected auto or off"}};
  for (const auto& [name, expected] : cases) {
    SCOPED_TRACE(name);
    setenv(name, "Winograd", 1);
    try {
      knobs_from_environment();
      ADD_FAILURE() << name << "=Winograd was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string(name) + "='Winograd': " + expected);
    }
    unsetenv(name);
  }
}

TEST_F(KnobsTest, ConfiguredKnobsReachThePlacementAndTheKernels) {
  Knobs k;
  k.cuda_conv = CudaConvKnob::im2col;
  k.cpu_isa = CpuIsaKnob::baseline;
  configure_knobs(k);
  EXPECT_EQ(ModelPlacement{}.knobs.cuda_conv, CudaConvKnob::im2col);
  EXPECT_FALSE(kernels::cpu_avx512f()) << "the baseline builds were asked for";
  EXPECT_FALSE(kernels::cpu_avx2()) << "the baseline builds were asked for";
  k.cpu_isa = CpuIsaKnob::avx2;
  configure_knobs(k);
  EXPECT_FALSE(kernels::cpu_avx512f()) << "AVX2 at most was asked for";
  EXPECT_EQ(kernels::cpu_avx2(),
            __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0);
  // Read once: the environment no longer matters to the process's knobs.
  setenv("LOCKSTEP_CUDA_CONV", "cudnn", 1);
  EXPECT_EQ(configured_knobs().cuda_conv, CudaConvKnob::im2col);
  k.cpu_isa = CpuIsaKnob::native;
  configure_knobs(k);
  EXPECT_EQ(kernels::cpu_avx512f(), __builtin_cpu_supports("avx512f") != 0);
}

}  // namespace
}  // namespace lockstep
