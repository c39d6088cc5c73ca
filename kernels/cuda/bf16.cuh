// float <-> bf16 on the device, for *.cu files only: the cast kernels (cast.cu) and the kernels
// that read or write bf16 directly (conv2d.cu's im2col, conv2d_cudnn.cu's epilogues). The same
// bit arithmetic as cast.cpp (not __float2bfloat16_rn, whose NaN encoding differs), so the device
// and host casts give identical words for every input, NaN included: round to nearest, ties to
// even; a NaN stays a quiet NaN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels::cuda {

__device__ __forceinline__ uint16_t to_bf16(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// bf16 -> float is exact: the word is the float's upper half.
__device__ __forceinline__ float from_bf16(uint16_t w) {
  return __uint_as_float(static_cast<uint32_t>(w) << 16);
}

// A value of a kernel templated on float or bf16 words, as a float (exact either way).
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(uint16_t w) { return from_bf16(w); }

}  // namespace lockstep::kernels::cuda
