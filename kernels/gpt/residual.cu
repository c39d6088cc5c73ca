#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/residual.h"

namespace lockstep::kernels {

namespace {

__global__ void residual_add_kernel(const float* a, const float* b, float* y, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) y[i] = a[i] + b[i];
}

__global__ void residual_accumulate_kernel(const float* src, float* dst, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) dst[i] += src[i];
}

}  // namespace

void residual_add_cuda(const float* a, const float* b, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_add_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(a, b, y, n);
  LS_CHECK_LAUNCH("residual_add_kernel");
}

void residual_accumulate_cuda(const float* src, float* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_accumulate_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(src, dst, n);
  LS_CHECK_LAUNCH("residual_accumulate_kernel");
}

}  // namespace lockstep::kernels
