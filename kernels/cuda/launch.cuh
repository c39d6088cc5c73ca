// Shared pieces of the CUDA twins, for *.cu files only: launch geometry for grid-stride loops,
// deterministic warp and block reductions, and stream-ordered scratch memory. Reductions here
// always combine values in the same order for the same launch shape, so a kernel built on them
// gives bit-identical results run after run (replicas must not drift).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cuda/check.h"

namespace lockstep::kernels::cuda {

constexpr int kThreads = 256;  // default block size of elementwise kernels
constexpr int kWarp = 32;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, capped because every kernel
// strides (the cap keeps the grid far below CUDA's limit whatever n is).
inline unsigned grid_for(size_t n, int threads = kThreads) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, 65536));
}

// Block size for one block per row of `width` values: whole warps, at most kThreads.
inline int threads_for_row(int width) {
  const int warps = (width + kWarp - 1) / kWarp;
  return std::clamp(warps, 1, kThreads / kWarp) * kWarp;
}

// Start and step of a grid-stride loop over a 1-D grid, in 64 bits (buffers may pass 2^31 items).
__device__ __forceinline__ size_t thread_index() {
  return blockIdx.x * size_t(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ size_t thread_stride() { return size_t(gridDim.x) * blockDim.x; }

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32 (at most 1024)
// and every thread of the block must call it. Safe to call repeatedly in a row.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : T(0);
  v = warp_sum(v);  // every warp reduces the same partials: all threads end with the total
  __syncthreads();  // partial may be overwritten by the next call only after everyone has read it
  return v;
}

// Device scratch that lives for one launcher call, allocated and freed in stream order
// (cudaMallocAsync draws from the device's memory pool, so repeated calls do not hit cudaMalloc).
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    LS_CHECK_CUDA(cudaMallocAsync(&ptr_, bytes > 0 ? bytes : 1, stream));
  }
  ~StreamScratch() { (void)cudaFreeAsync(ptr_, stream_); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace lockstep::kernels::cuda
