#include <cstdint>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/gelu.h"
#include "kernels/gpt/gelu_math.h"

namespace lockstep::kernels {

namespace {

__global__ void gelu_forward_kernel(const float* x, float* y, size_t n, uint16_t* y16,
                                    uint16_t* x16) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const float in = x[i];
    const float v = gelu_math::forward(in);
    if (y != nullptr) y[i] = v;
    if (y16 != nullptr) y16[i] = cuda::to_bf16(v);
    if (x16 != nullptr) x16[i] = cuda::to_bf16(in);
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride())
    dx[i] = dy[i] * gelu_math::derivative(x[i]);
}

// The GELU backward's values, for the column sums; __fmul_rn keeps the product rounded on its own
// (never contracted into the sum's addition), as gelu_backward_kernel stores it. X: the
// pre-activation's type, float or bf16 words.
template <class X>
struct GeluGradient {
  const X* x;
  const float* dy;
  template <int V>
  __device__ void operator()(size_t, size_t at, float (&v)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i)
      v[i] = __fmul_rn(dy[at + i], gelu_math::derivative(cuda::widen(x[at + i])));
  }
  bool aligned() const {
    return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(dy) % 16 == 0;
  }
};

}  // namespace

void gelu_backward_bf16_column_sums_cuda(const float* x, const float* dy, size_t rows, int cols,
                                         uint16_t* dx16, float* db, cudaStream_t stream) {
  cuda::add_column_sums_of(GeluGradient<float>{x, dy}, rows, cols, db, stream, dx16);
}

void gelu_backward_bf16_column_sums_cuda(const uint16_t* x16, const float* dy, size_t rows,
                                         int cols, uint16_t* dx16, float* db, cudaStream_t stream) {
  cuda::add_column_sums_of(GeluGradient<uint16_t>{x16, dy}, rows, cols, db, stream, dx16);
}

void gelu_forward_cuda(const float* x, float* y, size_t n, cudaStream_t stream, uint16_t* y16,
                       uint16_t* x16) {
  if (n == 0) return;
  gelu_forward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, y, n, y16, x16);
  LS_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward_cuda(const float* x, const float* dy, float* dx, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, dy, dx, n);
  LS_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace lockstep::kernels
