// The environment knobs: switches for comparisons and diagnosis that are not training options,
// read and validated in one place, once, at start-up (the apps read them before anything else, so
// a bad value is refused in words before any work), printed in the run header under --verbose,
// and passed down as values: the model's placement carries them to its layers (ModelPlacement,
// CudaLayerPlacement), and the kernels' process-wide settings (the CPU's vector ISA, cuDNN's
// algorithm order) are set from them here. No getenv in kernels/.
//
//   LOCKSTEP_CPU_CONV            auto (default) | onednn | direct   CPU convolution algorithm
//   LOCKSTEP_CUDA_CONV           (unset: any) | im2col | cudnn      CUDA convolution families
//   LOCKSTEP_CUDNN_DETERMINISTIC 1 (default) | 0                    cuDNN's deterministic first
//   LOCKSTEP_CPU_ISA             (unset: native) | avx2 | baseline  widest CPU vector builds
//   LOCKSTEP_CUDA_ATTENTION      flash (default) | cudnn |           bf16 GPT attention (cudnn:
//                                materialised                        cuDNN's fused attention)
//   LOCKSTEP_CPU_ATTENTION       flash (default) | materialised      CPU GPT attention
//   LOCKSTEP_CPU_LANES           auto (default) | off                a rank's threads each run
//                                                                    the model over their own
//                                                                    rows (ModelPlacement::lanes)
//                                                                    or share every operation
//   LOCKSTEP_CUDA_GELU           kernel (default) | epilogue         bf16 GPT MLP's GELU (epilogue:
//                                                                    in cuBLASLt's fc product)
//   LOCKSTEP_CUDA_LOGITS         fp32 (default) | bf16               bf16 GPT steps' logits
//   LOCKSTEP_CUDA_CONV_POOL      unfused (default) | fused           CUDA first convolution and
//                                                                    the max-pool (+ ReLU) after it
//   LOCKSTEP_CUDA_BF16_WEIGHTS   update (default) | forward          bf16 runs' weight copy: one,
//                                                                    written by the optimizer's
//                                                                    update (ModelPlacement::
//                                                                    bf16_params), or cast by each
//                                                                    layer at every forward
//
// configured_knobs() is thread-safe; configure_knobs() is for start-up and tests (not while
// layers are being built). No collective calls.
#pragma once

#include <string>

namespace lockstep {

enum class CpuConvKnob { automatic, onednn, direct };
enum class CudaConvKnob { any, im2col, cudnn };
enum class AttentionKnob { flash, materialised, cudnn };  // cudnn: LOCKSTEP_CUDA_ATTENTION only
enum class CpuIsaKnob { native, avx2, baseline };
enum class GeluKnob { kernel, epilogue };
enum class LogitsKnob { f32, bf16 };
enum class ConvPoolKnob { unfused, fused };
enum class Bf16WeightsKnob { update, forward };

struct Knobs {
  CpuConvKnob cpu_conv = CpuConvKnob::automatic;
  CudaConvKnob cuda_conv = CudaConvKnob::any;
  bool cudnn_deterministic = true;
  CpuIsaKnob cpu_isa = CpuIsaKnob::native;
  AttentionKnob cuda_attention = AttentionKnob::flash;
  AttentionKnob cpu_attention = AttentionKnob::flash;
  GeluKnob cuda_gelu = GeluKnob::kernel;
  LogitsKnob cuda_logits = LogitsKnob::f32;
  ConvPoolKnob cuda_conv_pool = ConvPoolKnob::unfused;
  Bf16WeightsKnob cuda_bf16_weights = Bf16WeightsKnob::update;
  bool cpu_lanes = true;  // LOCKSTEP_CPU_LANES=auto
};

// The knobs the environment sets now; UsageError naming the variable, its value and what it takes
// for a value it does not take (an empty value is the default).
Knobs knobs_from_environment();

// "LOCKSTEP_CPU_CONV=auto LOCKSTEP_CUDA_CONV=any ...": every knob with its value, for the header.
std::string knobs_text(const Knobs& k);

// The process's knobs: from the environment at the first call (which may throw UsageError), or
// what configure_knobs set. Either way the kernels' process-wide settings follow them.
const Knobs& configured_knobs();
void configure_knobs(const Knobs& k);

}  // namespace lockstep
