#include <cstdint>
#include <type_traits>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/layernorm.h"

// Rows up to 2,048 wide whose width is a multiple of 4 (every GPT's): a warp per row, the row held
// in registers, so x (and dy) are read once, and the sums are warp shuffles (no block barrier).
// Lane l owns the quads l, l + 32, l + 64, ... of its row and adds them in that order, then the
// warp's butterfly (warp_sum: every lane ends with the same bits): a fixed order that does not
// depend on the number of rows or on whether the pointers allow 16-byte loads (they decide only
// how a quad is loaded), so a one-row call (the decoder's) gives the bits of the same row in a
// whole batch. Other widths: one block per row (block_sum: a fixed combining order). dgamma and
// dbeta are column sums over rows (kernels/cuda/column_sums.cuh, deterministic, as dense.cu's db):
// dbeta's of dy, dgamma's of the terms dy * xhat, computed from x, dy and the row statistics as
// the column pass reads them (never stored).

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

constexpr int kRowsPerBlock = 8;  // warps of a block in the row kernels
constexpr int kMaxRowQuads = 16;  // a lane's quads at most: rows up to 2,048 wide
bool warp_rows(int dim) { return dim % 4 == 0 && dim <= cuda::kWarp * 4 * kMaxRowQuads; }

// Quad q of a row at p (16-byte loads where Vec), and its store.
template <bool Vec>
__device__ __forceinline__ void load_quad(const float* p, float (&v)[4]) {
  if constexpr (Vec) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = p[i];
  }
}
template <bool Vec>
__device__ __forceinline__ void store_quad(float* p, const float (&v)[4]) {
  if constexpr (Vec) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = v[i];
  }
}
template <bool Vec>
__device__ __forceinline__ void store_quad_bf16(uint16_t* p, const float (&v)[4]) {
  uint16_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = cuda::to_bf16(v[i]);
  if constexpr (Vec) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(w[0] | uint32_t(w[1]) << 16, w[2] | uint32_t(w[3]) << 16);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = w[i];
  }
}

// The forward pass, a warp per row; K quads a lane at most (32 * 4 * K >= dim).
template <int K, bool Vec>
__global__ void layernorm_rows_forward_kernel(LayerNormShape s, const float* x, const float* gamma,
                                              const float* beta, float* y, float* mean, float* rstd,
                                              uint16_t* y16) {
  const int lane = threadIdx.x % cuda::kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / cuda::kWarp;
  if (row >= s.rows) return;  // the whole warp: no shuffle is left waiting
  const int quads = s.dim / 4;
  const size_t off = static_cast<size_t>(row) * s.dim;
  float v[K][4];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int q = lane + k * cuda::kWarp;
    if (q < quads) {
      load_quad<Vec>(x + off + 4 * q, v[k]);
#pragma unroll
      for (int i = 0; i < 4; ++i) sum += v[k][i];
    }
  }
  const float m = cuda::warp_sum(sum) / s.dim;
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (lane + k * cuda::kWarp < quads) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float d = v[k][i] - m;
        var += d * d;
      }
    }
  }
  const float rs = rsqrtf(cuda::warp_sum(var) / s.dim + kLayerNormEps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int q = lane + k * cuda::kWarp;
    if (q < quads) {
      float g[4], b[4], out[4];
      load_quad<Vec>(gamma + 4 * q, g);
      load_quad<Vec>(beta + 4 * q, b);
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = (v[k][i] - m) * rs * g[i] + b[i];
      if (y != nullptr) store_quad<Vec>(y + off + 4 * q, out);
      if (y16 != nullptr) store_quad_bf16<Vec>(y16 + off + 4 * q, out);
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// dx, a warp per row: x, dy and gamma read once into registers.
template <int K, bool Vec>
__global__ void layernorm_rows_backward_kernel(LayerNormShape s, const float* x, const float* gamma,
                                               const float* mean, const float* rstd,
                                               const float* dy, float* dx, const float* dx_add) {
  const int lane = threadIdx.x % cuda::kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / cuda::kWarp;
  if (row >= s.rows) return;
  const int quads = s.dim / 4;
  const size_t off = static_cast<size_t>(row) * s.dim;
  const float m = mean[row], rs = rstd[row];
  float xhat[K][4], g[K][4];
  float g_sum = 0.0f, gx_sum = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int q = lane + k * cuda::kWarp;
    if (q < quads) {
      float xv[4], dv[4], gv[4];
      load_quad<Vec>(x + off + 4 * q, xv);
      load_quad<Vec>(dy + off + 4 * q, dv);
      load_quad<Vec>(gamma + 4 * q, gv);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xhat[k][i] = (xv[i] - m) * rs;
        g[k][i] = __fmul_rn(dv[i], gv[i]);
        g_sum += g[k][i];
        gx_sum += g[k][i] * xhat[k][i];
      }
    }
  }
  const float g_mean = cuda::warp_sum(g_sum) / s.dim;
  const float gx_mean = cuda::warp_sum(gx_sum) / s.dim;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int q = lane + k * cuda::kWarp;
    if (q < quads) {
      float out[4], add[4];
      if (dx_add != nullptr) load_quad<Vec>(dx_add + off + 4 * q, add);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = rs * (g[k][i] - g_mean - xhat[k][i] * gx_mean);
        // __fadd_rn: v rounded on its own, as residual_accumulate reads it (never contracted).
        out[i] = dx_add != nullptr ? __fadd_rn(v, add[i]) : v;
      }
      store_quad<Vec>(dx + off + 4 * q, out);
    }
  }
}

bool on16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls launch(K, Vec) with K the fewest quads a lane (of 1, 2, 4, 8, 16) that cover the width
// and Vec whether the loads are 16 bytes, both as compile-time constants (std::integral_constant).
template <class Launch>
void with_row_kernel(int dim, bool vec, Launch&& launch) {
  const int per_lane = (dim / 4 + cuda::kWarp - 1) / cuda::kWarp;
  auto go = [&](auto k) {
    if (vec)
      launch(k, std::true_type{});
    else
      launch(k, std::false_type{});
  };
  if (per_lane <= 1)
    go(std::integral_constant<int, 1>{});
  else if (per_lane <= 2)
    go(std::integral_constant<int, 2>{});
  else if (per_lane <= 4)
    go(std::integral_constant<int, 4>{});
  else if (per_lane <= 8)
    go(std::integral_constant<int, 8>{});
  else
    go(std::integral_constant<int, 16>{});
}
// A warp per row: the rows' blocks.
unsigned row_blocks(const LayerNormShape& s) {
  return static_cast<unsigned>((s.rows + kRowsPerBlock - 1) / kRowsPerBlock);
}
constexpr int kRowThreads = kRowsPerBlock * cuda::kWarp;

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
  if (warp_rows(s.dim)) {
    const bool vec = on16(x) && on16(gamma) && on16(beta) && (y == nullptr || on16(y)) &&
                     reinterpret_cast<uintptr_t>(y16) % 8 == 0;
    with_row_kernel(s.dim, vec, [&](auto k, auto v) {
      layernorm_rows_forward_kernel<k(), v()>
          <<<row_blocks(s), kRowThreads, 0, stream>>>(s, x, gamma, beta, y, mean, rstd, y16);
    });
    LS_CHECK_LAUNCH("layernorm_rows_forward_kernel");
    return;
  }
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
  if (dx != nullptr && warp_rows(s.dim)) {
    const bool vec =
        on16(x) && on16(gamma) && on16(dy) && on16(dx) && (dx_add == nullptr || on16(dx_add));
    with_row_kernel(s.dim, vec, [&](auto k, auto v) {
      layernorm_rows_backward_kernel<k(), v()>
          <<<row_blocks(s), kRowThreads, 0, stream>>>(s, x, gamma, mean, rstd, dy, dx, dx_add);
    });
    LS_CHECK_LAUNCH("layernorm_rows_backward_kernel");
  } else if (dx != nullptr) {
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
