// Layer normalisation over the last dimension of row-major float32 [rows, dim], with a learned
// scale gamma[dim] and shift beta[dim], as torch.nn.functional.layer_norm(x, (dim,), gamma, beta,
// eps) with eps = kLayerNormEps:
//   mean_r = mean_j x[r, j],  rstd_r = 1 / sqrt(mean_j (x[r, j] - mean_r)^2 + eps)  (biased var)
//   y[r, j] = (x[r, j] - mean_r) * rstd_r * gamma[j] + beta[j]
// Forward overwrites y and saves mean[rows] and rstd[rows] for the backward pass. Backward, with
// xhat = (x - mean) * rstd and g = dy * gamma:
//   dx[r, j] = rstd_r * (g[r, j] - mean_j g[r, :] - xhat[r, j] * mean_j (g[r, :] * xhat[r, :]))
// overwritten (skipped when null), dgamma += sum_r dy * xhat and dbeta += sum_r dy (accumulated,
// as dense.h; either may be null). No aliasing between inputs and outputs. Row statistics are
// summed in double on the CPU (in 8 interleaved partial sums, added in order) and in fp32 in a
// fixed order on the GPU.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

constexpr float kLayerNormEps = 1e-5f;  // GPT-2's and PyTorch's default

struct LayerNormShape {
  int rows = 0, dim = 0;
};

// Throws std::invalid_argument naming `who` unless rows >= 0 and dim > 0 (both twins call it).
void check_layernorm_shape(const LayerNormShape& s, const char* who);

void layernorm_forward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                           const float* beta, float* y, float* mean, float* rstd);
void layernorm_backward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                            const float* mean, const float* rstd, const float* dy, float* dx,
                            float* dgamma, float* dbeta);

// CUDA twins (layernorm.cu): device pointers, same contract, enqueued on `stream`. The parameter
// gradients are column sums in a fixed order (no atomics): identical inputs give identical bits.
// With y16, y is also (or, with y null, only) written there in bf16 (cast.h's words): the input
// of a bf16 GEMM without a cast pass of its own.
void layernorm_forward_cuda(const LayerNormShape& s, const float* x, const float* gamma,
                            const float* beta, float* y, float* mean, float* rstd,
                            cudaStream_t stream, uint16_t* y16 = nullptr);
// With dx_add, dx = the gradient above + dx_add (a residual branch's gradient joining; the same
// fp32 addition as residual_accumulate after it, so the same bits). dx must not overlap x or dy:
// the parameter gradients' pass reads them after dx is written.
void layernorm_backward_cuda(const LayerNormShape& s, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, float* dx,
                             float* dgamma, float* dbeta, cudaStream_t stream,
                             const float* dx_add = nullptr);

}  // namespace lockstep::kernels
