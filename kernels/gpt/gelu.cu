#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/gelu_math.h"

namespace lockstep::kernels {

namespace {

__global__ void gelu_forward_kernel(const float* x, float* y, size_t n, uint16_t* y16) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const float v = gelu_math::forward(x[i]);
    if (y != nullptr) y[i] = v;
    if (y16 != nullptr) y16[i] = cuda::to_bf16(v);
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    dx[i] = dy[i] * gelu_math::derivative(x[i]);
}

}  // namespace

void gelu_forward_cuda(const float* x, float* y, size_t n, cudaStream_t stream, uint16_t* y16) {
  if (n == 0) return;
  gelu_forward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, y, n, y16);
  LS_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward_cuda(const float* x, const float* dy, float* dx, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, dy, dx, n);
  LS_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace lockstep::kernels
