#include "kernels/cast.h"

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels {

namespace {

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, uint16_t* __restrict__ out,
                                   size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    out[i] = cuda::to_bf16(in[i]);
}

__global__ void bf16_to_f32_kernel(const uint16_t* __restrict__ in, float* __restrict__ out,
                                   size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    out[i] = cuda::from_bf16(in[i]);
}

}  // namespace

void cast_f32_to_bf16_cuda(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(in, out, n);
  LS_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void cast_bf16_to_f32_cuda(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(in, out, n);
  LS_CHECK_LAUNCH("bf16_to_f32_kernel");
}

}  // namespace lockstep::kernels
