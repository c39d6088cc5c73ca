#include "kernels/activation.h"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels {

namespace {

// No __restrict__: the header allows y == x and dx == dy. Each element depends only on the same
// index, so in-place use is safe.
__global__ void relu_forward_kernel(const float* x, float* y, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    // As the CPU twin: only negatives become 0, so NaN passes on (the trainer's NaN guard sees a
    // diverging run) and -0 and +-Inf map as they do there.
    const float v = x[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

void relu_forward_cuda(const float* x, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_forward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, y, n);
  LS_CHECK_LAUNCH("relu_forward_kernel");
}

void relu_backward_cuda(const float* y, const float* dy, float* dx, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_backward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(y, dy, dx, n);
  LS_CHECK_LAUNCH("relu_backward_kernel");
}

}  // namespace lockstep::kernels
