// Numeric precision of training: the dtype the layers compute in (--precision) and the dtype the
// gradient all-reduce carries (--grad-reduce-dtype). fp32 everywhere is the default and the only
// choice on the CPU for compute; bf16 compute keeps fp32 master weights, gradients and optimizer
// state, and casts activations and weights for the bf16 GEMMs (a CUDA path). A bf16 reduction
// casts each gradient bucket to bf16, all-reduces it (summed in float32 by the backends, rounded
// to bf16 on the wire) and casts the result back: half the bytes, about 3 significant digits.
#pragma once

#include <string>

namespace lockstep {

enum class Precision { fp32, bf16 };

// "fp32" | "bf16"; UsageError naming `option` (e.g. "--precision") otherwise.
Precision parse_precision(const std::string& text, const char* option);
const char* precision_name(Precision p);

// What the --device cuda training path still lacks in this build, in words for the refusal
// "GPU training is not finished in this build: ...". The kernels' CUDA twins exist; the layers,
// model buffers and trainer step do not run on the device yet.
std::string gpu_training_missing();

}  // namespace lockstep
