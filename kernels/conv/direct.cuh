// What the direct convolution kernels share (conv2d.cu's direct family and conv_pool.cu's fused
// first layer), for those *.cu files only: the shape as plain ints, the bf16 operand rounding, the
// launch dispatch on precision and index width, and the filter pass's two halves' common parts
// (a block's partial sums through shared memory, then the blocks' sums in order). Deterministic:
// the order of every sum depends on the launch shape only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/conv/conv2d.h"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels::direct {

// The shape as plain ints, passed by value to the kernels.
struct ConvDims {
  int n, h, w, c_in, kh, kw, stride, pad_h, pad_w, out_h, out_w;
};

inline ConvDims dims_of(const Conv2dShape& s, const Conv2dGeometry& g) {
  return {s.n, s.h, s.w, s.c_in, s.kh, s.kw, s.stride, s.pad_h, s.pad_w, g.out_h, g.out_w};
}

// x rounded to bf16 when kBf16 (the bf16 contract: operands in bf16, sums in fp32).
template <bool kBf16>
__device__ __forceinline__ float operand(float v) {
  if constexpr (kBf16)
    return cuda::from_bf16(cuda::to_bf16(v));
  else
    return v;
}

// The end of a filter pass's first half: thread (g, co) of the block's groups of c_out holds its
// rows' sums acc[k] for the taps and acc[kConv2dDirectMaxTaps] for the bias; the groups' sums are
// added in group order through shared memory (groups x (taps + 1) x c_out floats) and the block
// writes part[blockIdx.x][k][co], k = taps for the bias.
__device__ __forceinline__ void write_block_partials(const float* acc, int taps, int c_out,
                                                     float* __restrict__ part) {
  extern __shared__ float shared[];
  const int groups = blockDim.x / c_out;
  const int co = threadIdx.x % c_out, g = threadIdx.x / c_out;
  const int width = (taps + 1) * c_out;
  for (int k = 0; k < taps; ++k) shared[g * width + k * c_out + co] = acc[k];
  shared[g * width + taps * c_out + co] = acc[kConv2dDirectMaxTaps];
  __syncthreads();
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    float sum = 0.0f;
    for (int gg = 0; gg < groups; ++gg) sum += shared[gg * width + j];
    part[blockIdx.x * size_t(width) + j] = sum;
  }
}

// The second half: one thread per (k, co) sums the blocks' partials in block order and adds them
// to dw[k][co] (HWIO: k * c_out + co) or, for k == taps, to db[co].
template <int Unused = 0>
__global__ void filter_sum_kernel(const float* __restrict__ part, int blocks, int taps, int c_out,
                                  float* __restrict__ dw, float* __restrict__ db) {
  const int width = (taps + 1) * c_out;
  for (size_t j = cuda::thread_index(); j < size_t(width); j += cuda::thread_stride()) {
    float sum = 0.0f;
    for (int blk = 0; blk < blocks; ++blk) sum += part[size_t(blk) * width + j];
    if (j < size_t(taps) * c_out) {
      if (dw != nullptr) dw[j] += sum;
    } else if (db != nullptr) {
      db[j - size_t(taps) * c_out] += sum;
    }
  }
}

// Calls launch(kBf16, index) with the kernels' template arguments as values: std::true_type for
// bf16, and a uint32_t index where `narrow` (the loops' 32-bit indices: a 64-bit division is a
// long software sequence on the GPU), else a size_t. The same sums either way.
template <class Launch>
void dispatch(bool bf16, bool narrow, const Launch& launch) {
  if (bf16 && narrow)
    launch(std::true_type{}, uint32_t{});
  else if (bf16)
    launch(std::true_type{}, size_t{});
  else if (narrow)
    launch(std::false_type{}, uint32_t{});
  else
    launch(std::false_type{}, size_t{});
}

}  // namespace lockstep::kernels::direct
