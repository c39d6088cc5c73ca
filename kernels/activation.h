// Elementwise activations. relu_backward uses the forward output y (y > 0 <=> x > 0), so the input
// need not be kept. dx may alias dy.
#pragma once

#include <cstddef>

namespace lockstep::kernels {

void relu_forward_cpu(const float* x, float* y, size_t n);
void relu_backward_cpu(const float* y, const float* dy, float* dx, size_t n);

}  // namespace lockstep::kernels
