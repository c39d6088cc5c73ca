// Conversions between float32 and bfloat16 for mixed precision (bf16 compute, fp32 master weights).
// bf16 values are raw 16-bit words (uint16_t), as elsewhere in Lockstep (runtime/base/dtype.h).
// float -> bf16 rounds to nearest, ties to even; a NaN stays a quiet NaN of the same sign; values
// beyond the bf16 range become infinities. bf16 -> float is exact. The CPU and CUDA twins give
// identical bits. in and out must not overlap.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

void cast_f32_to_bf16_cpu(const float* in, uint16_t* out, size_t n);
void cast_bf16_to_f32_cpu(const uint16_t* in, float* out, size_t n);

// CUDA twins (cast.cu): device pointers, enqueued on `stream`.
void cast_f32_to_bf16_cuda(const float* in, uint16_t* out, size_t n, cudaStream_t stream);
void cast_bf16_to_f32_cuda(const uint16_t* in, float* out, size_t n, cudaStream_t stream);

}  // namespace lockstep::kernels
