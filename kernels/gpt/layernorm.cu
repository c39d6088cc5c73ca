#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/layernorm.h"

// One block per row for the row statistics and dx (block_sum: a fixed combining order). dgamma
// and dbeta are column sums over rows (kernels/cuda/column_sums.cuh, deterministic, as dense.cu's
// db): dbeta's of dy, dgamma's of the terms dy * xhat, computed from x, dy and the row statistics
// as the column pass reads them (never stored).

namespace lockstep::kernels {

namespace {

__global__ void layernorm_forward_kernel(LayerNormShape s, const float* x, const float* gamma,
                                         const float* beta, float* y, float* mean, float* rstd,
                                         uint16_t* y16) {
  const size_t off = static_cast<size_t>(blockIdx.x) * s.dim;
  const float* xr = x + off;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < s.dim; j += blockDim.x) sum += xr[j];
  const float m = cuda::block_sum(sum) / s.dim;
  float var = 0.0f;
  for (int j = threadIdx.x; j < s.dim; j += blockDim.x) {
    const float d = xr[j] - m;
    var += d * d;
  }
  const float rs = rsqrtf(cuda::block_sum(var) / s.dim + kLayerNormEps);
  for (int j = threadIdx.x; j < s.dim; j += blockDim.x) {
    const float v = (xr[j] - m) * rs * gamma[j] + beta[j];
    if (y != nullptr) y[off + j] = v;
    if (y16 != nullptr) y16[off + j] = cuda::to_bf16(v);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
}

// dx for one row per block.
__global__ void layernorm_backward_kernel(LayerNormShape s, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, const float* dy,
                                          float* dx, const float* dx_add) {
  const size_t off = static_cast<size_t>(blockIdx.x) * s.dim;
  const float m = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int j = threadIdx.x; j < s.dim; j += blockDim.x) {
    const float xhat = (x[off + j] - m) * rs;
    const float g = dy[off + j] * gamma[j];
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = cuda::block_sum(g_sum) / s.dim;
  const float gx_mean = cuda::block_sum(gx_sum) / s.dim;
  for (int j = threadIdx.x; j < s.dim; j += blockDim.x) {
    const float xhat = (x[off + j] - m) * rs;
    const float v = rs * (dy[off + j] * gamma[j] - g_mean - xhat * gx_mean);
    // __fadd_rn: v rounded on its own, as residual_accumulate reads it (never contracted).
    dx[off + j] = dx_add != nullptr ? __fadd_rn(v, dx_add[off + j]) : v;
  }
}

// dgamma's terms dy * xhat, xhat = (x - mean) * rstd of the element's row; __fmul_rn keeps the
// product rounded on its own, never contracted into the column sum's addition.
struct LayerNormTerms {
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  template <int V>
  __device__ void operator()(size_t r, size_t at, float (&v)[V]) const {
    const float m = mean[r], rs = rstd[r];
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = __fmul_rn(dy[at + i], (x[at + i] - m) * rs);
  }
  bool aligned() const {
    return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(dy) % 16 == 0;
  }
};

}  // namespace

void layernorm_forward_cuda(const LayerNormShape& s, const float* x, const float* gamma,
                            const float* beta, float* y, float* mean, float* rstd,
                            cudaStream_t stream, uint16_t* y16) {
  check_layernorm_shape(s, "layernorm_forward_cuda");
  if (s.rows == 0) return;
  layernorm_forward_kernel<<<s.rows, cuda::threads_for_row(s.dim), 0, stream>>>(s, x, gamma, beta,
                                                                                y, mean, rstd, y16);
  LS_CHECK_LAUNCH("layernorm_forward_kernel");
}

void layernorm_backward_cuda(const LayerNormShape& s, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, float* dx,
                             float* dgamma, float* dbeta, cudaStream_t stream,
                             const float* dx_add) {
  check_layernorm_shape(s, "layernorm_backward_cuda");
  if (s.rows == 0) return;
  const size_t rows = static_cast<size_t>(s.rows);
  if (dx != nullptr) {
    layernorm_backward_kernel<<<s.rows, cuda::threads_for_row(s.dim), 0, stream>>>(
        s, x, gamma, mean, rstd, dy, dx, dx_add);
    LS_CHECK_LAUNCH("layernorm_backward_kernel");
  }
  if (dgamma != nullptr)
    cuda::add_column_sums_of(LayerNormTerms{x, dy, mean, rstd}, rows, s.dim, dgamma, stream,
                             nullptr);
  if (dbeta != nullptr) cuda::add_column_sums(dy, rows, s.dim, dbeta, stream);
}

}  // namespace lockstep::kernels
