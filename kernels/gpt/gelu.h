// GELU, the tanh approximation GPT-2 uses and PyTorch computes as gelu(x, approximate='tanh'):
//   y = 0.5 x (1 + tanh(s (x + 0.044715 x^3))),  s = sqrt(2 / pi).
// Backward reads the forward input x (not y: GELU is not monotonic, y does not give x back) and
// overwrites dx = dy * gelu'(x). dx may alias dy; y may alias x. Elementwise over n floats.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

void gelu_forward_cpu(const float* x, float* y, size_t n);
void gelu_backward_cpu(const float* x, const float* dy, float* dx, size_t n);

// CUDA twins (gelu.cu): device pointers, enqueued on `stream`; the same aliasing is allowed.
// With y16, y is also (or, with y null, only) written there in bf16 (cast.h's words); with x16, x
// is written there in bf16 too (what gemm_bf16_bias_gelu_cuda keeps of the pre-activation).
void gelu_forward_cuda(const float* x, float* y, size_t n, cudaStream_t stream,
                       uint16_t* y16 = nullptr, uint16_t* x16 = nullptr);
void gelu_backward_cuda(const float* x, const float* dy, float* dx, size_t n, cudaStream_t stream);
// The backward pass fused with what a bf16 product's backward needs of its output gradient: for x
// and dy [rows, cols], the values v = dy * gelu'(x) that gelu_backward_cuda computes are written in
// bf16 to dx16 and summed by column into db (db[j] += sum_r v[r, j], as the bias gradient's column
// sums would add them, kernels/cuda/column_sums.cuh), in one pass and without an fp32 copy.
void gelu_backward_bf16_column_sums_cuda(const float* x, const float* dy, size_t rows, int cols,
                                         uint16_t* dx16, float* db, cudaStream_t stream);
// The same from the pre-activation kept in bf16 (x16: gemm_bf16_bias_gelu_cuda's pre16), widened
// to fp32 for gelu'(x).
void gelu_backward_bf16_column_sums_cuda(const uint16_t* x16, const float* dy, size_t rows,
                                         int cols, uint16_t* dx16, float* db, cudaStream_t stream);

}  // namespace lockstep::kernels
