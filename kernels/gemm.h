// General matrix multiply on row-major float32 matrices: C = alpha * op(A) op(B) + beta * C,
// where op(X) is X or its transpose. op(A) is m x k, op(B) is k x n, C is m x n. The CPU twin goes
// through the optimised BLAS (cblas_sgemm); the CUDA twin (gemm_cuda) through cuBLAS.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

struct GemmShape {
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
};

void gemm_cpu(const GemmShape& s, const float* a, const float* b, float* c);
// The oneDNN twin (onednn/gemm_onednn.cpp, a matmul primitive per shape; onednn.h), same contract.
void gemm_onednn(const GemmShape& s, const float* a, const float* b, float* c);
// C = op(A) op(B) + bias, bias[n] added to every row of C by the matmul itself (no pass over C
// before or after it); alpha must be 1, beta 0 and k > 0 (std::invalid_argument otherwise).
void gemm_bias_onednn(const GemmShape& s, const float* a, const float* b, const float* bias,
                      float* c);
// The same product on bf16 operands (raw words, kernels/cast.h), accumulated in fp32 into an fp32
// C, by oneDNN's bf16 matmul: its bf16 dot-product instructions where the CPU has them
// (AVX512_BF16, AMX). Where oneDNN has no bf16 matmul for this CPU (an AVX2-only one) it throws
// std::runtime_error saying so. lockstep-bench gemm times it (the layers compute in fp32).
void gemm_bf16_onednn(const GemmShape& s, const uint16_t* a, const uint16_t* b, float* c);

// CUDA twins (gemm.cu, through cuBLAS): device pointers, enqueued on `stream`, not waited for.
void gemm_cuda(const GemmShape& s, const float* a, const float* b, float* c, cudaStream_t stream);
// Mixed precision: A and B in bf16 (raw 16-bit words, see cast.h), C and the accumulation in fp32.
void gemm_bf16_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b, float* c,
                    cudaStream_t stream);
// The same with C written in bf16 (each fp32 sum rounded to nearest even by cuBLAS): a bf16 run's
// tied-head logits. beta must be 0 (std::invalid_argument otherwise).
void gemm_bf16_out_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b, uint16_t* c16,
                        cudaStream_t stream);
// The same with a bias row added to every row of C in the GEMM's epilogue (cuBLASLt's
// CUBLASLT_EPILOGUE_BIAS): C = alpha op(A) op(B) + beta C_in + bias, bias of n floats, C_in = c_in
// where given (a residual stream to add: it must not overlap c) and C otherwise; one write of C
// instead of a fill and the GEMM's read of it. beta is 0 or 1. Where a pointer is not 16-byte
// aligned or cuBLASLt offers no algorithm for the shape, the fill and gemm_bf16_cuda do it
// instead (the same values up to the order of fp32 additions).
void gemm_bf16_bias_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                         const float* bias, float* c, cudaStream_t stream,
                         const float* c_in = nullptr);
// A bf16 product with the bias in cuBLASLt's epilogue and C written in bf16: c16 = bf16 of
// op(A) op(B) + bias, summed in fp32 and rounded once, the bias in bf16 (cuBLASLt takes a bias of
// the output's type): a transformer's qkv product written as the attention reads it. alpha 1 and
// beta 0, else std::invalid_argument. Returns false, having enqueued nothing, where a pointer does
// not start on 16 bytes or cuBLASLt offers no algorithm for the shape.
bool gemm_bf16_bias_out_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                             const uint16_t* bias16, uint16_t* c16, cudaStream_t stream);
// A bf16 product with the bias and GELU in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_GELU_AUX_BIAS),
// for a transformer MLP's first product: with z = op(A) op(B) + bias summed in fp32, y16 = bf16 of
// GELU(z) (cuBLASLt's tanh form, GPT-2's and gelu.h's function) and pre16 = bf16 of z, the
// pre-activation its backward pass reads (gelu.h's bf16 column sums). The bias comes in bf16
// (cuBLASLt takes a bias of the output's type). alpha 1 and beta 0, else std::invalid_argument.
// Returns false, having enqueued nothing, where n is not a multiple of 8, a pointer does not start
// on 16 bytes or cuBLASLt offers no algorithm for the shape; the caller then computes it another
// way.
bool gemm_bf16_bias_gelu_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                              const uint16_t* bias16, uint16_t* y16, uint16_t* pre16,
                              cudaStream_t stream);

// The backward pass of that GELU fused into the product that gives its output's gradient (a
// transformer MLP's second product's dx): c16 = bf16 of GELU'(z) * (op(A) op(B)), z the
// pre-activation's words pre16 as gemm_bf16_bias_gelu_cuda kept them (same shape as C, leading
// dimension n), the product summed in fp32 and the result rounded once (cuBLASLt's
// CUBLASLT_EPILOGUE_DGELU, the derivative of its tanh form). alpha 1 and beta 0, else
// std::invalid_argument. Returns false, having enqueued nothing, where n is not a multiple of 8, a
// pointer does not start on 16 bytes or cuBLASLt offers no algorithm for the shape.
bool gemm_bf16_dgelu_out_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b,
                              const uint16_t* pre16, uint16_t* c16, cudaStream_t stream);

// For lockstep-bench gemm: every algorithm cuBLASLt's heuristic offers (at most max_algorithms,
// in its order) for c16 = bf16 of op(A) op(B) without an epilogue (the plans above ask the same
// heuristic with theirs set, and may be offered other algorithms: this shows how far its first
// pick can be from the fastest, not the plans' own picks), each launched once untimed and then
// `launches` times between two CUDA events on `stream`: the milliseconds of one product each, -1
// for one that refused the shape. Waits for the stream; overwrites c16. alpha 1, beta 0,
// max_algorithms and launches 1 or more, else std::invalid_argument.
std::vector<float> gemm_bf16_lt_algorithm_times_cuda(const GemmShape& s, const uint16_t* a,
                                                     const uint16_t* b, uint16_t* c16,
                                                     int max_algorithms, int launches,
                                                     cudaStream_t stream);

}  // namespace lockstep::kernels
