#include "runtime/base/knobs.h"

#include <cstdlib>
#include <mutex>
#include <optional>

#include "kernels/conv/conv2d.h"
#include "kernels/parallel.h"
#include "runtime/base/error.h"

namespace lockstep {

namespace {

// The variable's value; "" when unset.
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

[[noreturn]] void refuse(const char* name, const std::string& value, const char* expected) {
  throw UsageError(std::string(name) + "='" + value + "': expected " + expected);
}

// LOCKSTEP_CUDA_ATTENTION and LOCKSTEP_CPU_ATTENTION take flash and materialised; the GPU's also
// cudnn.
AttentionKnob attention_knob(const char* name, bool gpu) {
  const std::string value = env(name);
  if (value == "materialised") return AttentionKnob::materialised;
  if (gpu && value == "cudnn") return AttentionKnob::cudnn;
  if (!value.empty() && value != "flash")
    refuse(name, value, gpu ? "flash, cudnn or materialised" : "flash or materialised");
  return AttentionKnob::flash;
}
// A knob of two values: false for `usual` (also unset or empty), true for `other`; UsageError
// naming both for anything else.
bool other_value(const char* name, const char* usual, const char* other) {
  const std::string value = env(name);
  if (value == other) return true;
  if (!value.empty() && value != usual)
    refuse(name, value, (std::string(usual) + " or " + other).c_str());
  return false;
}
const char* attention_text(AttentionKnob k) {
  return k == AttentionKnob::materialised ? "materialised"
         : k == AttentionKnob::cudnn      ? "cudnn"
                                          : "flash";
}

std::mutex knobs_mutex;
std::optional<Knobs> knobs_now;  // guarded by knobs_mutex; never reset once set

void apply(const Knobs& k) {
  kernels::set_cpu_isa_cap(k.cpu_isa == CpuIsaKnob::baseline ? kernels::CpuIsa::baseline
                           : k.cpu_isa == CpuIsaKnob::avx2   ? kernels::CpuIsa::avx2
                                                             : kernels::CpuIsa::native);
  kernels::set_cudnn_deterministic_first(k.cudnn_deterministic);
}

}  // namespace

Knobs knobs_from_environment() {
  Knobs k;
  const std::string cpu_conv = env("LOCKSTEP_CPU_CONV");
  if (cpu_conv == "onednn")
    k.cpu_conv = CpuConvKnob::onednn;
  else if (cpu_conv == "direct")
    k.cpu_conv = CpuConvKnob::direct;
  else if (!cpu_conv.empty() && cpu_conv != "auto")
    refuse("LOCKSTEP_CPU_CONV", cpu_conv, "auto, onednn or direct");

  const std::string cuda_conv = env("LOCKSTEP_CUDA_CONV");
  if (cuda_conv == "im2col")
    k.cuda_conv = CudaConvKnob::im2col;
  else if (cuda_conv == "cudnn")
    k.cuda_conv = CudaConvKnob::cudnn;
  else if (!cuda_conv.empty())
    refuse("LOCKSTEP_CUDA_CONV", cuda_conv, "cudnn or im2col");

  const std::string deterministic = env("LOCKSTEP_CUDNN_DETERMINISTIC");
  if (deterministic == "0")
    k.cudnn_deterministic = false;
  else if (!deterministic.empty() && deterministic != "1")
    refuse("LOCKSTEP_CUDNN_DETERMINISTIC", deterministic, "0 or 1");

  const std::string isa = env("LOCKSTEP_CPU_ISA");
  if (isa == "baseline")
    k.cpu_isa = CpuIsaKnob::baseline;
  else if (isa == "avx2")
    k.cpu_isa = CpuIsaKnob::avx2;
  else if (!isa.empty() && isa != "native")
    refuse("LOCKSTEP_CPU_ISA", isa, "native, avx2 or baseline");

  k.cuda_attention = attention_knob("LOCKSTEP_CUDA_ATTENTION", true);
  k.cpu_attention = attention_knob("LOCKSTEP_CPU_ATTENTION", false);

  if (other_value("LOCKSTEP_CUDA_GELU", "kernel", "epilogue")) k.cuda_gelu = GeluKnob::epilogue;
  if (other_value("LOCKSTEP_CUDA_LOGITS", "fp32", "bf16")) k.cuda_logits = LogitsKnob::bf16;
  if (other_value("LOCKSTEP_CUDA_CONV_POOL", "unfused", "fused"))
    k.cuda_conv_pool = ConvPoolKnob::fused;
  if (other_value("LOCKSTEP_CUDA_BF16_WEIGHTS", "update", "forward"))
    k.cuda_bf16_weights = Bf16WeightsKnob::forward;
  k.cpu_lanes = !other_value("LOCKSTEP_CPU_LANES", "auto", "off");
  return k;
}

std::string knobs_text(const Knobs& k) {
  const char* cpu_conv = k.cpu_conv == CpuConvKnob::onednn   ? "onednn"
                         : k.cpu_conv == CpuConvKnob::direct ? "direct"
                                                             : "auto";
  const char* cuda_conv = k.cuda_conv == CudaConvKnob::im2col  ? "im2col"
                          : k.cuda_conv == CudaConvKnob::cudnn ? "cudnn"
                                                               : "any";
  return std::string("LOCKSTEP_CPU_CONV=") + cpu_conv + " LOCKSTEP_CUDA_CONV=" + cuda_conv +
         " LOCKSTEP_CUDNN_DETERMINISTIC=" + (k.cudnn_deterministic ? "1" : "0") +
         " LOCKSTEP_CPU_ISA=" +
         (k.cpu_isa == CpuIsaKnob::baseline ? "baseline"
          : k.cpu_isa == CpuIsaKnob::avx2   ? "avx2"
                                            : "native") +
         " LOCKSTEP_CUDA_ATTENTION=" + attention_text(k.cuda_attention) +
         " LOCKSTEP_CPU_ATTENTION=" + attention_text(k.cpu_attention) +
         " LOCKSTEP_CUDA_GELU=" + (k.cuda_gelu == GeluKnob::epilogue ? "epilogue" : "kernel") +
         " LOCKSTEP_CUDA_LOGITS=" + (k.cuda_logits == LogitsKnob::bf16 ? "bf16" : "fp32") +
         " LOCKSTEP_CUDA_CONV_POOL=" +
         (k.cuda_conv_pool == ConvPoolKnob::fused ? "fused" : "unfused") +
         " LOCKSTEP_CUDA_BF16_WEIGHTS=" +
         (k.cuda_bf16_weights == Bf16WeightsKnob::forward ? "forward" : "update") +
         " LOCKSTEP_CPU_LANES=" + (k.cpu_lanes ? "auto" : "off");
}

const Knobs& configured_knobs() {
  std::lock_guard<std::mutex> lock(knobs_mutex);
  if (!knobs_now) {
    const Knobs k = knobs_from_environment();  // throws before anything is set
    apply(k);
    knobs_now = k;
  }
  return *knobs_now;
}

void configure_knobs(const Knobs& k) {
  std::lock_guard<std::mutex> lock(knobs_mutex);
  apply(k);
  knobs_now = k;
}

}  // namespace lockstep
