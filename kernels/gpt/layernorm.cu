#include <algorithm>
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
// dbeta are column sums over rows: dbeta's of dy, dgamma's of the terms dy * xhat, never stored.
// Where both are asked for and the width takes a warp per row up to 1,024 (GPT-2 small's and
// medium's), the backward pass's dx kernel adds them up too, block by block, as it holds x and dy
// (so they are read once, not three times), and a second pass adds the blocks' partials
// (layernorm_rows_backward_sums_kernel: a fixed order, set by the number of rows). Otherwise they
// are kernels/cuda/column_sums.cuh's passes (as dense.cu's db), the terms computed from x, dy and
// the row statistics as the column pass reads them.

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

// Row `row`'s dx by its warp (skipped with dx null): x, dy and gamma read once into registers.
// With Sums, the row's dgamma and dbeta terms (dy * xhat, dy) added to the lane's column partials
// sg and sb (quad k, element i: column 4 (lane + 32 k) + i).
template <int K, bool Vec, bool Sums>
__device__ __forceinline__ void backward_row(const LayerNormShape& s, int row, const float* x,
                                             const float* gamma, const float* mean,
                                             const float* rstd, const float* dy, float* dx,
                                             const float* dx_add, float (&sg)[K][4],
                                             float (&sb)[K][4]) {
  const int lane = threadIdx.x % cuda::kWarp;
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
        if constexpr (Sums) {
          // __fmul_rn: the term rounded on its own, never contracted into the partial's addition.
          sg[k][i] += __fmul_rn(dv[i], xhat[k][i]);
          sb[k][i] += dv[i];
        }
      }
    }
  }
  if (dx == nullptr) return;  // the whole warp alike: no shuffle is left waiting
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

// dx, a warp per row.
template <int K, bool Vec>
__global__ void layernorm_rows_backward_kernel(LayerNormShape s, const float* x, const float* gamma,
                                               const float* mean, const float* rstd,
                                               const float* dy, float* dx, const float* dx_add) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / cuda::kWarp;
  if (row >= s.rows) return;
  float unused[K][4];
  backward_row<K, Vec, false>(s, row, x, gamma, mean, rstd, dy, dx, dx_add, unused, unused);
}

// The rows a warp takes in layernorm_rows_backward_sums_kernel: 4, or more where that would make
// more than 256 blocks, so that the blocks fit in one wave (two an SM on 132 SMs at 768 wide) and
// the second pass adds at most 256 partials a column (32 a thread).
int sums_rows_per_warp(int rows) { return std::max(4, (rows + 2047) / 2048); }
// Widths up to 1,024 only: each lane holds its columns' two partials beside the row, 128 registers
// a thread at 768 wide (two blocks an SM), 160 at 1,024; wider rows would spill (255 at 2,048),
// and take the column passes instead.
constexpr int kSumsMaxQuads = 8;

// Sums the warps' column partials v of a block into warp 0's in a fixed tree: v_w += v_(w + 4)
// (w < 4), then v_w += v_(w + 2) (w < 2), then v_0 += v_1, through `pass` ([4][dim] floats of
// shared memory, 16-byte quads: every lane's accesses neighbouring, no bank conflicts).
template <int K>
__device__ __forceinline__ void add_warp_partials(float (&v)[K][4], int dim, float* pass) {
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  const int quads = dim / 4;
#pragma unroll
  for (int half = kRowsPerBlock / 2; half > 0; half /= 2) {
    if (warp >= half && warp < 2 * half) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int q = lane + k * cuda::kWarp;
        if (q < quads)
          reinterpret_cast<float4*>(pass + (warp - half) * dim)[q] =
              make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
      }
    }
    __syncthreads();
    if (warp < half) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int q = lane + k * cuda::kWarp;
        if (q < quads) {
          const float4 p = reinterpret_cast<const float4*>(pass + warp * dim)[q];
          v[k][0] += p.x, v[k][1] += p.y, v[k][2] += p.z, v[k][3] += p.w;
        }
      }
    }
    __syncthreads();
  }
}

// dx as layernorm_rows_backward_kernel, and the column partials of dgamma and dbeta in the same
// pass (x and dy read once for all three): block b takes the rows b R + w + 8 i (R = 8
// rows_per_warp rows, warp w, i < rows_per_warp, in that order, each term added to the lane's
// partial from zero), its warps' partials then added in add_warp_partials' tree, and written to
// partial [b][2][dim] (dgamma's, then dbeta's), which add_column_partials sums over the blocks.
template <int K, bool Vec>
__global__ void layernorm_rows_backward_sums_kernel(LayerNormShape s, int rows_per_warp,
                                                    const float* x, const float* gamma,
                                                    const float* mean, const float* rstd,
                                                    const float* dy, float* dx, const float* dx_add,
                                                    float* partial) {
  extern __shared__ float4 pass_quads[];  // [kRowsPerBlock / 2][dim]
  float* pass = reinterpret_cast<float*>(pass_quads);
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  float sg[K][4] = {}, sb[K][4] = {};
  const int first = blockIdx.x * kRowsPerBlock * rows_per_warp + warp;
  for (int i = 0; i < rows_per_warp; ++i) {
    const int row = first + i * kRowsPerBlock;
    if (row >= s.rows) break;  // the warp alike; every warp still reaches the barriers below
    backward_row<K, Vec, true>(s, row, x, gamma, mean, rstd, dy, dx, dx_add, sg, sb);
  }
  add_warp_partials(sg, s.dim, pass);
  add_warp_partials(sb, s.dim, pass);
  if (warp != 0) return;
  auto* out = reinterpret_cast<float4*>(partial + static_cast<size_t>(blockIdx.x) * 2 * s.dim);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int q = lane + k * cuda::kWarp;
    if (q < s.dim / 4) {
      out[q] = make_float4(sg[k][0], sg[k][1], sg[k][2], sg[k][3]);
      out[s.dim / 4 + q] = make_float4(sb[k][0], sb[k][1], sb[k][2], sb[k][3]);
    }
  }
}

bool on16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls launch(K, Vec) with K the fewest quads a lane (of 1, 2, 4, 6, 8, 16) that cover the width
// and Vec whether the loads are 16 bytes, both as compile-time constants (std::integral_constant).
// MaxK < 16: widths over 32 * 4 * MaxK are not asked for (their kernels are not compiled).
template <int MaxK = kMaxRowQuads, class Launch>
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
  else if (per_lane <= 6)  // 768 wide (GPT-2 small's): 6 quads a lane, none held idle
    go(std::integral_constant<int, 6>{});
  else if (per_lane <= 8)
    go(std::integral_constant<int, 8>{});
  else if constexpr (MaxK >= 16)
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
  if (dgamma != nullptr && dbeta != nullptr && warp_rows(s.dim) &&
      s.dim <= cuda::kWarp * 4 * kSumsMaxQuads) {
    // dx and both parameter gradients' partials in one pass over x and dy, then their sums.
    const bool vec = on16(x) && on16(gamma) && on16(dy) && on16(dx) && on16(dx_add);
    const int per_warp = sums_rows_per_warp(s.rows);
    const size_t blocks = (rows + kRowsPerBlock * per_warp - 1) / (kRowsPerBlock * per_warp);
    const size_t dim = static_cast<size_t>(s.dim);
    cuda::StreamScratch partial(blocks * 2 * dim * sizeof(float), stream);
    const size_t pass_bytes = kRowsPerBlock / 2 * dim * sizeof(float);  // 16 KiB at 1,024 wide
    with_row_kernel<kSumsMaxQuads>(s.dim, vec, [&](auto k, auto v) {
      layernorm_rows_backward_sums_kernel<k(), v()>
          <<<static_cast<unsigned>(blocks), kRowThreads, pass_bytes, stream>>>(
              s, per_warp, x, gamma, mean, rstd, dy, dx, dx_add, partial.as<float>());
    });
    LS_CHECK_LAUNCH("layernorm_rows_backward_sums_kernel");
    cuda::add_column_partials(partial.as<float>(), blocks, 2 * s.dim, 2 * dim, dgamma, stream,
                              s.dim, dbeta);
    return;
  }
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
