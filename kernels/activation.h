// Elementwise activations. relu_backward uses the forward output y (y > 0 <=> x > 0), so the input
// need not be kept. dx may alias dy.
#pragma once

#include <cstddef>

#include "kernels/cuda_stream.h"

namespace lockstep::kernels {

void relu_forward_cpu(const float* x, float* y, size_t n);
void relu_backward_cpu(const float* y, const float* dy, float* dx, size_t n);

// CUDA twins (activation.cu): device pointers, enqueued on `stream`; the same aliasing is allowed.
void relu_forward_cuda(const float* x, float* y, size_t n, cudaStream_t stream);
void relu_backward_cuda(const float* y, const float* dy, float* dx, size_t n, cudaStream_t stream);

}  // namespace lockstep::kernels
