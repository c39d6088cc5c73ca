// Dense (fully connected) layer on row-major float32: y[batch, out] = x[batch, in] . w[in, out] +
// b[out]. Backward: dx = dy . w^T (overwritten; skipped when dx is null), dw += x^T . dy, db +=
// sum_rows(dy) (accumulated, so micro-batches can add into one gradient buffer). Stateless
// functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

struct DenseShape {
  int batch = 0, in = 0, out = 0;
};

// Throws std::invalid_argument naming `who` unless batch >= 0 and in, out > 0 (every twin checks
// its shape this way; dense.cpp).
void check_dense_shape(const DenseShape& s, const char* who);

void dense_forward_cpu(const DenseShape& s, const float* x, const float* w, const float* b,
                       float* y);
void dense_backward_cpu(const DenseShape& s, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db);

// The same three products through oneDNN (gemm_onednn; onednn.h), same contract.
void dense_forward_onednn(const DenseShape& s, const float* x, const float* w, const float* b,
                          float* y);
void dense_backward_onednn(const DenseShape& s, const float* x, const float* w, const float* dy,
                           float* dx, float* dw, float* db);

// CUDA twins (dense.cu): device pointers, same contract, enqueued on `stream`.
void dense_forward_cuda(const DenseShape& s, const float* x, const float* w, const float* b,
                        float* y, cudaStream_t stream);
void dense_backward_cuda(const DenseShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db, cudaStream_t stream);

// bf16 compute (dense.cu): the three GEMMs take bf16 operands (raw words, cast.h) and accumulate
// in fp32; y, dx, dw, db and the bias stay fp32. w16 is the caller's bf16 copy of w
// (cast_f32_to_bf16_cuda), current whenever w changes. Forward casts x into x16 [batch, in], which
// the backward pass of the same batch reads in place of x (the caller keeps it in between); with x
// null, x16 already holds the input (written in bf16 by the kernel that produced it). The bias is
// added in the GEMM's epilogue (gemm_bf16_bias_cuda), and so is `residual` [batch, out] where given
// (y = x w + b + residual; it must not overlap y). Backward casts dy into the scratch dy16
// [batch, out] in the pass that sums the fp32 dy into db. With dy null, dy16 already holds the
// gradient in bf16 (written so by the kernel that produced it) and db, where given, gets the sums
// of those words widened: the bits of the sums of an fp32 dy holding their values.
void dense_forward_bf16_cuda(const DenseShape& s, const float* x, const uint16_t* w16,
                             const float* b, float* y, uint16_t* x16, cudaStream_t stream,
                             const float* residual = nullptr);
// With dx16, dx is written there in bf16 instead (dx null: cuBLAS's fp32 sums rounded once, by
// cuBLAS): the input gradient of a layer whose backward pass reads bf16 (cuDNN's attention,
// attention_cudnn.h), without an fp32 dx and a cast pass.
void dense_backward_bf16_cuda(const DenseShape& s, const uint16_t* x16, const uint16_t* w16,
                              const float* dy, float* dx, float* dw, float* db, uint16_t* dy16,
                              cudaStream_t stream, uint16_t* dx16 = nullptr);
// The forward product written in bf16: y16 [batch, out] = the words of x16 w16 + b, the input x16
// in bf16 already, the bias in bf16 too (b16, cuBLASLt's epilogue: gemm_bf16_bias_out_cuda) and
// each sum rounded once; where cuBLASLt cannot take the product, the fp32 product with b (fp32)
// into a scratch of the stream's, then rounded (the bias not rounded first). The qkv product whose
// words cuDNN's attention reads in place.
void dense_forward_bf16_out_cuda(const DenseShape& s, const uint16_t* x16, const uint16_t* w16,
                                 const uint16_t* b16, const float* b, uint16_t* y16,
                                 cudaStream_t stream);

}  // namespace lockstep::kernels
