// Max pooling, NHWC, window k x k with stride k (no padding; a trailing row/column that does not
// fill a window is dropped, as in floor mode). argmax records, per output element, the flat input
// index of the maximum, for the backward pass. Backward overwrites dx (zeros, then scatters dy);
// its argmax must be one the forward pass wrote (each index inside its own image's input, or -1).
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

struct PoolShape {
  int n = 0, h = 0, w = 0, c = 0, k = 2;
  int out_h() const { return h / k; }
  int out_w() const { return w / k; }
};

// Checks a shape for both twins (std::invalid_argument naming `who`); returns the input's element
// count.
size_t maxpool_input_elements(const PoolShape& s, const char* who);

// With `relu` the forward pass writes max(0, maximum) (a NaN passes) and argmax -1 where that is
// not positive, which the backward pass skips: a ReLU after the pool, fused.
void maxpool_forward_cpu(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                         bool relu = false);
void maxpool_backward_cpu(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx);

// The same over an input laid out in 16-channel blocks (oneDNN's aBcd16b, as
// conv2d_forward_onednn writes it with Conv2dIo::y_blocked16: x[n][c / 16][h][w][c % 16]; c a
// multiple of 16): y is NHWC as above, or in the same blocks with y_blocked16 (argmax follows y's
// order, and the backward pass's dy and dy_blocked16 must match the forward's y); argmax indexes
// the blocked input, whose gradient the backward pass writes in the same blocked layout (every
// element: no zeroing needed). The same maxima, ties and gradients as the NHWC pair. AVX-512 code
// where the CPU has it (parallel.h). With `relu` the forward pass writes max(0, maximum) (a NaN
// passes) and argmax -1 where that is not positive, so the backward pass gives those windows no
// gradient: a ReLU after the pool, fused.
void maxpool_forward_blocked16_cpu(const PoolShape& s, const float* x_blocked, float* y,
                                   int32_t* argmax, bool y_blocked16 = false, bool relu = false);
void maxpool_backward_blocked16_cpu(const PoolShape& s, const float* dy, const int32_t* argmax,
                                    float* dx_blocked, bool dy_blocked16 = false);

// CUDA twins (pool.cu): device pointers, enqueued on `stream`.
void maxpool_forward_cuda(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                          cudaStream_t stream);
void maxpool_backward_cuda(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx,
                           cudaStream_t stream);

}  // namespace lockstep::kernels
