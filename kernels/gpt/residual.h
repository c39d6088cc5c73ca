// The residual connection of a transformer block, elementwise over n floats:
//   forward  y = a + b              (y may alias a or b: the residual stream updated in place)
//   backward dst += src            (the gradient of the residual stream gains the branch's dx)
// The backward pass of y = a + b hands dy to both a and b unchanged; residual_accumulate is the
// one arithmetic step that needs, where a branch's kernel overwrote its own dx.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

void residual_add_cpu(const float* a, const float* b, float* y, size_t n);
void residual_accumulate_cpu(const float* src, float* dst, size_t n);

// CUDA twins (residual.cu): device pointers, enqueued on `stream`; the same aliasing is allowed.
void residual_add_cuda(const float* a, const float* b, float* y, size_t n, cudaStream_t stream);
void residual_accumulate_cuda(const float* src, float* dst, size_t n, cudaStream_t stream);

}  // namespace lockstep::kernels
