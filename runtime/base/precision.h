// Numeric precision of training: the dtype the layers compute in (--precision) and the dtype the
// gradient all-reduce carries (--grad-reduce-dtype). fp32 everywhere is the default and the only
// choice on the CPU for compute; bf16 compute keeps fp32 master weights, gradients and optimizer
// state, and casts activations and weights for the bf16 GEMMs (a CUDA path). A bf16 reduction
// casts each gradient bucket to bf16, all-reduces it (summed in float32 by the backends, rounded
// to bf16 on the wire) and casts the result back: half the bytes, about 3 significant digits.
// Types and pure functions: thread-safe, no collective calls.
#pragma once

#include <string>

namespace lockstep {

enum class Precision { fp32, bf16 };

// "fp32" | "bf16"; UsageError naming `option` (e.g. "--precision") otherwise.
Precision parse_precision(const std::string& text, const char* option);
const char* precision_name(Precision p);

// Why --device cuda cannot train in this build, in words for the refusal: only a build without
// CUDA refuses it (the CUDA build trains on the device: trainer.h, device_step.h).
std::string gpu_training_missing();

}  // namespace lockstep
