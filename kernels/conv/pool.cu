#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/conv/pool.h"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels {

namespace {

// One thread per output element (img, oy, ox, ch). Taps are visited in the CPU twin's order
// (ky, then kx) with a strict comparison, so the first maximum of a window wins a tie there too.
__global__ void maxpool_forward_kernel(PoolShape s, const float* __restrict__ x,
                                       float* __restrict__ y, int32_t* __restrict__ argmax,
                                       size_t outputs) {
  const int oh = s.h / s.k, ow = s.w / s.k;
  for (size_t i = cuda::thread_index(); i < outputs; i += cuda::thread_stride()) {
    const int ch = static_cast<int>(i % s.c);
    size_t rest = i / s.c;
    const int ox = static_cast<int>(rest % ow);
    rest /= ow;
    const int oy = static_cast<int>(rest % oh);
    const int img = static_cast<int>(rest / oh);
    float best = 0.0f;
    int32_t where = 0;
    for (int ky = 0; ky < s.k; ++ky) {
      for (int kx = 0; kx < s.k; ++kx) {
        const int32_t idx = ((img * s.h + oy * s.k + ky) * s.w + ox * s.k + kx) * s.c + ch;
        const float v = x[idx];
        if ((ky == 0 && kx == 0) || v > best) {
          best = v;
          where = idx;
        }
      }
    }
    y[i] = best;
    argmax[i] = where;
  }
}

// dx was zeroed; each output adds its gradient at its argmax. Windows do not overlap, so with an
// argmax from the forward pass every address is written once; the atomic keeps a caller's argmax
// with repeats correct, and the bounds check keeps a bad one from writing outside dx.
__global__ void maxpool_backward_kernel(const float* __restrict__ dy,
                                        const int32_t* __restrict__ argmax, float* __restrict__ dx,
                                        size_t outputs, size_t inputs) {
  for (size_t i = cuda::thread_index(); i < outputs; i += cuda::thread_stride()) {
    const int32_t a = argmax[i];
    if (a >= 0 && static_cast<size_t>(a) < inputs) atomicAdd(dx + a, dy[i]);
  }
}

}  // namespace

void maxpool_forward_cuda(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                          cudaStream_t stream) {
  maxpool_input_elements(s, "maxpool_forward_cuda");
  const size_t outputs = static_cast<size_t>(s.n) * s.out_h() * s.out_w() * s.c;
  if (outputs == 0) return;
  maxpool_forward_kernel<<<cuda::grid_for(outputs), cuda::kThreads, 0, stream>>>(s, x, y, argmax,
                                                                                 outputs);
  LS_CHECK_LAUNCH("maxpool_forward_kernel");
}

void maxpool_backward_cuda(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx,
                           cudaStream_t stream) {
  const size_t inputs = maxpool_input_elements(s, "maxpool_backward_cuda");
  if (inputs == 0) return;
  LS_CHECK_CUDA(cudaMemsetAsync(dx, 0, inputs * sizeof(float), stream));
  const size_t outputs = static_cast<size_t>(s.n) * s.out_h() * s.out_w() * s.c;
  maxpool_backward_kernel<<<cuda::grid_for(outputs), cuda::kThreads, 0, stream>>>(dy, argmax, dx,
                                                                                  outputs, inputs);
  LS_CHECK_LAUNCH("maxpool_backward_kernel");
}

}  // namespace lockstep::kernels
