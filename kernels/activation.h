// Elementwise activations. relu_forward maps negatives to 0 and passes every other value on
// unchanged: NaN stays NaN (a diverging run shows NaN, not zeros), -0 stays -0, +Inf stays +Inf.
// relu_backward uses the forward output y (y > 0 <=> x > 0), so the input need not be kept; the
// gradient is 0 where y is NaN or zero. dx may alias dy. Both twins give the same bits.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

void relu_forward_cpu(const float* x, float* y, size_t n);
void relu_backward_cpu(const float* y, const float* dy, float* dx, size_t n);

// CUDA twins (activation.cu): device pointers, enqueued on `stream`; the same aliasing is allowed.
void relu_forward_cuda(const float* x, float* y, size_t n, cudaStream_t stream);
void relu_backward_cuda(const float* y, const float* dy, float* dx, size_t n, cudaStream_t stream);

}  // namespace lockstep::kernels
