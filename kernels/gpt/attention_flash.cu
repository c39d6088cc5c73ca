// Flash-style causal attention on the tensor cores (attention_flash.h), after FlashAttention-2's
// arithmetic (Dao, 2023: online softmax, backward recomputing the probabilities from the saved
// log-sum-exp). Thread blocks of 4 warps own 64 rows of a tile, 16 rows per warp; the products are
// PTX mma.sync m16n8k16 on bf16 operands with fp32 accumulators, whose register layout the PTX ISA
// documents (thread lane = 4 g + t holds rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8
// accumulator tile), so the softmax runs on the accumulators in registers and the probabilities
// become the next product's A operand without leaving them. Tiles are read from the fp32 buffers
// and rounded to bf16 into shared memory, row-major where an operand is read along its rows and
// transposed where it is read along its columns, both with a pitch of 8 extra bf16 (conflict-free
// fragment loads).
//   forward      per (query tile, batch x head): Q fragments in registers, key tiles streamed up to
//                the diagonal; out = O / l, lse = m + log l.
//   row_dots     D[row] = dout . out over the head's columns (one warp per row).
//   backward_kv  per (key tile, ...): K, V fragments in registers; query tiles from the diagonal
//                down: P^T = exp(K Q^T * scale - lse), dV += P^T dO, dP^T = V dO^T,
//                dS^T = P^T (dP^T - D), dK += dS^T Q; dK * scale and dV written once.
//   backward_q   per (query tile, ...): key tiles up to the diagonal: P, dP = dO V^T, dS, dQ += dS K.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/attention_flash.h"

namespace lockstep::kernels {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                    // rows of a query or key tile
constexpr int kFlashWarps = kTile / 16;      // one warp per 16 rows
constexpr int kFlashThreads = kFlashWarps * cuda::kWarp;
constexpr int kLdt = kTile + 8;              // pitch of a transposed tile [Dh][64]

// A tile's shared memory: row-major [64][Dh + 8] or transposed [Dh][64 + 8] bf16.
template <int Dh>
constexpr int kTileElems = kTile * (Dh + 8) > Dh * kLdt ? kTile * (Dh + 8) : Dh * kLdt;

template <int Dh>
constexpr size_t smem_bytes(int tiles) {
  return tiles * sizeof(bf16) * kTileElems<Dh> + 2 * kTile * sizeof(float);
}

// d += a b for one 16 x 8 tile: a 16 x 16 (row-major fragment), b 16 x 8 (column fragment).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t word(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The A fragment of rows r0.., columns k0.. of a row-major bf16 matrix (pitch ld).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* m, int ld, int r0, int k0) {
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const bf16* p = m + (r0 + g) * ld + k0 + 2 * t;
  a[0] = word(p);
  a[1] = word(p + 8 * ld);
  a[2] = word(p + 8);
  a[3] = word(p + 8 * ld + 8);
}

// The B fragment of columns n0.. (8), rows k0.. (16) of B, read from its transpose B^T stored
// row-major (pitch ld): B^T[n][k].
__device__ __forceinline__ void load_b(uint32_t& b0, uint32_t& b1, const bf16* bt, int ld, int n0,
                                       int k0) {
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const bf16* p = bt + (n0 + g) * ld + k0 + 2 * t;
  b0 = word(p);
  b1 = word(p + 8);
}

// Accumulator tiles s[nb] (nb = 0..7: 64 columns) as the A fragments of a product over those 64
// columns, 16 at a time: a[kk] covers columns 16 kk .. 16 kk + 15.
__device__ __forceinline__ void as_a(const float (&s)[8][4], uint32_t (&a)[4][4]) {
  #pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pack(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = pack(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// s[nb] = A B for the warp's 16 rows and 64 columns: A as Dh / 16 fragments, B^T a row-major
// [64][Dh + 8] tile (the other operand read along its rows: B = tile^T).
template <int Dh>
__device__ __forceinline__ void product_abt(const uint32_t (&a)[Dh / 16][4], const bf16* tile,
                                            float (&s)[8][4]) {
  #pragma unroll
  for (int nb = 0; nb < 8; ++nb) {
    s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
    #pragma unroll
    for (int k = 0; k < Dh / 16; ++k) {
      uint32_t b0, b1;
      load_b(b0, b1, tile, Dh + 8, nb * 8, k * 16);
      mma(s[nb], a[k], b0, b1);
    }
  }
}

// acc[nd] += P B for the warp's rows: P as 4 fragments over 64 columns, B a [64][Dh] matrix read
// from its transpose, a [Dh][64 + 8] tile.
template <int Dh>
__device__ __forceinline__ void accumulate_pb(float (&acc)[Dh / 8][4], const uint32_t (&p)[4][4],
                                              const bf16* tile_t) {
  #pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    #pragma unroll
    for (int nd = 0; nd < Dh / 8; ++nd) {
      uint32_t b0, b1;
      load_b(b0, b1, tile_t, kLdt, nd * 8, kk * 16);
      mma(acc[nd], p[kk], b0, b1);
    }
}

// Rows r0 .. r0 + 63 of a [T, Dh] matrix whose row t starts at src + t * stride (fp32, 16-byte
// aligned), rounded to bf16: row-major into dst [64][Dh + 8], and, where dst_t is given, transposed
// into dst_t [Dh][64 + 8]. Rows at or past T are zeros.
template <int Dh>
__device__ void load_tile(const float* src, size_t stride, int r0, int T, bf16* dst,
                          bf16* dst_t = nullptr) {
  constexpr int quads = Dh / 4;
  for (int i = threadIdx.x; i < kTile * quads; i += kFlashThreads) {
    const int r = i / quads, c = (i % quads) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < T) v = *reinterpret_cast<const float4*>(src + (r0 + r) * stride + c);
    if (dst != nullptr) {
      __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(dst + r * (Dh + 8) + c);
      d[0] = __floats2bfloat162_rn(v.x, v.y);
      d[1] = __floats2bfloat162_rn(v.z, v.w);
    }
    if (dst_t != nullptr) {
      dst_t[(c + 0) * kLdt + r] = __float2bfloat16_rn(v.x);
      dst_t[(c + 1) * kLdt + r] = __float2bfloat16_rn(v.y);
      dst_t[(c + 2) * kLdt + r] = __float2bfloat16_rn(v.z);
      dst_t[(c + 3) * kLdt + r] = __float2bfloat16_rn(v.w);
    }
  }
}

// Per-row values r0 .. r0 + 63 of src (zeros at or past T) into dst.
__device__ void load_rows(const float* src, int r0, int T, float* dst) {
  for (int i = threadIdx.x; i < kTile; i += kFlashThreads) dst[i] = r0 + i < T ? src[r0 + i] : 0.0f;
}

// Writes the warp's accumulators acc[nd] (rows r0 + g and r0 + g + 8, columns 8 nd + 2t, + 1)
// times `mul` into dst (row stride `stride`); rows at or past T are skipped.
template <int Dh>
__device__ void store_acc(const float (&acc)[Dh / 8][4], float mul, float* dst, size_t stride,
                          int r0, int T) {
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = r0 + g + 8 * half;
    if (row >= T) continue;
    #pragma unroll
    for (int nd = 0; nd < Dh / 8; ++nd)
      *reinterpret_cast<float2*>(dst + row * stride + nd * 8 + 2 * t) =
          make_float2(acc[nd][2 * half] * mul, acc[nd][2 * half + 1] * mul);
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(AttentionShape s, float scale, const float* qkv, float* out, float* lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kTileElems<Dh>;
  bf16* vt = ks + kTileElems<Dh>;
  const int T = s.seq, C = s.heads * s.head_dim;
  const int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, wr = (threadIdx.x / cuda::kWarp) * 16;
  const size_t stride = 3 * static_cast<size_t>(C);
  const float* base = qkv + static_cast<size_t>(b) * T * stride + h * Dh;

  load_tile<Dh>(base, stride, q0, T, qs);
  __syncthreads();
  uint32_t qa[Dh / 16][4];
  #pragma unroll
  for (int k = 0; k < Dh / 16; ++k) load_a(qa[k], qs, Dh + 8, wr, k * 16);
  float o[Dh / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row[2] = {q0 + wr + g, q0 + wr + g + 8};

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // every warp done with the previous ks and vt
    load_tile<Dh>(base + C, stride, k0, T, ks);
    load_tile<Dh>(base + 2 * C, stride, k0, T, nullptr, vt);
    __syncthreads();
    float sc[8][4];
    product_abt<Dh>(qa, ks, sc);
    float mx[2] = {-INFINITY, -INFINITY};
    #pragma unroll
    for (int nb = 0; nb < 8; ++nb)
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + nb * 8 + 2 * t + (i & 1);
        const float v = key <= row[i / 2] && key < T ? sc[nb][i] * scale : -INFINITY;
        sc[nb][i] = v;
        mx[i / 2] = fmaxf(mx[i / 2], v);
      }
    float alpha[2];
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float m_new = fmaxf(m[j], quad_max(mx[j]));  // finite: key k0 <= row is in the row
      alpha[j] = __expf(m[j] - m_new);
      m[j] = m_new;
      l[j] *= alpha[j];
    }
    #pragma unroll
    for (int nb = 0; nb < 8; ++nb)
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = __expf(sc[nb][i] - m[i / 2]);
        sc[nb][i] = p;
        l[i / 2] += p;
      }
    #pragma unroll
    for (int nd = 0; nd < Dh / 8; ++nd)
      #pragma unroll
      for (int i = 0; i < 4; ++i) o[nd][i] *= alpha[i / 2];
    uint32_t pa[4][4];
    as_a(sc, pa);
    accumulate_pb<Dh>(o, pa, vt);
  }
  #pragma unroll
  for (int j = 0; j < 2; ++j) l[j] = quad_sum(l[j]);
  #pragma unroll
  for (int nd = 0; nd < Dh / 8; ++nd)
    #pragma unroll
    for (int i = 0; i < 4; ++i) o[nd][i] /= l[i / 2];
  store_acc<Dh>(o, 1.0f, out + static_cast<size_t>(b) * T * C + h * Dh, C, q0 + wr, T);
  if (t == 0)
    #pragma unroll
    for (int j = 0; j < 2; ++j)
      if (row[j] < T) lse[static_cast<size_t>(bh) * T + row[j]] = m[j] + logf(l[j]);
}

// dots[(b * H + h) * T + t] = sum over the head's columns of dout * out, one warp per row.
__global__ void row_dots_kernel(AttentionShape s, const float* dout, const float* out,
                                float* dots) {
  const int Dh = s.head_dim, T = s.seq, C = s.heads * s.head_dim;
  const size_t rows = static_cast<size_t>(s.batch) * s.heads * T;
  const size_t warps = size_t(gridDim.x) * (blockDim.x / cuda::kWarp);
  const int lane = threadIdx.x % cuda::kWarp;
  for (size_t w = cuda::thread_index() / cuda::kWarp; w < rows; w += warps) {
    const size_t t = w % T, bh = w / T, b = bh / s.heads, h = bh % s.heads;
    const size_t at = (b * T + t) * C + h * Dh;
    float v = 0.0f;
    for (int d = lane; d < Dh; d += cuda::kWarp) v += dout[at + d] * out[at + d];
    v = cuda::warp_sum(v);
    if (lane == 0) dots[w] = v;
  }
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kv_kernel(AttentionShape s, float scale, const float* qkv, const float* dout,
                             const float* lse, const float* dots, float* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);  // K at first, then Q
  bf16* qt_s = qs + kTileElems<Dh>;          // V at first, then Q^T
  bf16* dos = qt_s + kTileElems<Dh>;
  bf16* dot_s = dos + kTileElems<Dh>;
  float* lse_s = reinterpret_cast<float*>(dot_s + kTileElems<Dh>);
  float* dd_s = lse_s + kTile;
  const int T = s.seq, C = s.heads * s.head_dim, tiles = (T + kTile - 1) / kTile;
  const int kt = gridDim.x - 1 - blockIdx.x;  // the first keys (the most query tiles) first
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const int k0 = kt * kTile, wr = (threadIdx.x / cuda::kWarp) * 16;
  const size_t stride = 3 * static_cast<size_t>(C);
  const float* base = qkv + static_cast<size_t>(b) * T * stride + h * Dh;
  const float* dbase = dout + static_cast<size_t>(b) * T * C + h * Dh;

  load_tile<Dh>(base + C, stride, k0, T, qs);
  load_tile<Dh>(base + 2 * C, stride, k0, T, qt_s);
  __syncthreads();
  uint32_t ka[Dh / 16][4], va[Dh / 16][4];
  #pragma unroll
  for (int k = 0; k < Dh / 16; ++k) {
    load_a(ka[k], qs, Dh + 8, wr, k * 16);
    load_a(va[k], qt_s, Dh + 8, wr, k * 16);
  }
  float dk[Dh / 8][4] = {}, dv[Dh / 8][4] = {};
  const int key[2] = {k0 + wr + g, k0 + wr + g + 8};
  for (int qt = kt; qt < tiles; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // every warp done with the previous tiles
    load_tile<Dh>(base, stride, q0, T, qs, qt_s);
    load_tile<Dh>(dbase, C, q0, T, dos, dot_s);
    load_rows(lse + static_cast<size_t>(bh) * T, q0, T, lse_s);
    load_rows(dots + static_cast<size_t>(bh) * T, q0, T, dd_s);
    __syncthreads();
    float st[8][4], dpt[8][4];
    product_abt<Dh>(ka, qs, st);    // S^T: keys x queries
    product_abt<Dh>(va, dos, dpt);  // dP^T = V dO^T
    #pragma unroll
    for (int nb = 0; nb < 8; ++nb)
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = nb * 8 + 2 * t + (i & 1), query = q0 + c;
        const float p = key[i / 2] <= query && query < T && key[i / 2] < T
                            ? __expf(st[nb][i] * scale - lse_s[c])
                            : 0.0f;
        st[nb][i] = p;
        dpt[nb][i] = p * (dpt[nb][i] - dd_s[c]);
      }
    uint32_t pa[4][4];
    as_a(st, pa);
    accumulate_pb<Dh>(dv, pa, dot_s);  // dV += P^T dO
    as_a(dpt, pa);
    accumulate_pb<Dh>(dk, pa, qt_s);  // dK += dS^T Q
  }
  float* dst = dqkv + static_cast<size_t>(b) * T * stride + h * Dh;
  store_acc<Dh>(dk, scale, dst + C, stride, k0 + wr, T);
  store_acc<Dh>(dv, 1.0f, dst + 2 * C, stride, k0 + wr, T);
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q_kernel(AttentionShape s, float scale, const float* qkv, const float* dout,
                            const float* lse, const float* dots, float* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);  // Q at first, then K
  bf16* vs = ks + kTileElems<Dh>;            // dO at first, then V
  bf16* kt_s = vs + kTileElems<Dh>;
  const int T = s.seq, C = s.heads * s.head_dim;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, wr = (threadIdx.x / cuda::kWarp) * 16;
  const size_t stride = 3 * static_cast<size_t>(C);
  const float* base = qkv + static_cast<size_t>(b) * T * stride + h * Dh;

  load_tile<Dh>(base, stride, q0, T, ks);
  load_tile<Dh>(dout + static_cast<size_t>(b) * T * C + h * Dh, C, q0, T, vs);
  __syncthreads();
  uint32_t qa[Dh / 16][4], da[Dh / 16][4];
  #pragma unroll
  for (int k = 0; k < Dh / 16; ++k) {
    load_a(qa[k], ks, Dh + 8, wr, k * 16);
    load_a(da[k], vs, Dh + 8, wr, k * 16);
  }
  const int row[2] = {q0 + wr + g, q0 + wr + g + 8};
  float row_lse[2], row_dot[2];
  #pragma unroll
  for (int j = 0; j < 2; ++j) {
    const size_t at = static_cast<size_t>(bh) * T + (row[j] < T ? row[j] : 0);
    row_lse[j] = lse[at];
    row_dot[j] = dots[at];
  }
  float dq[Dh / 8][4] = {};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // every warp done with the previous tiles
    load_tile<Dh>(base + C, stride, k0, T, ks, kt_s);
    load_tile<Dh>(base + 2 * C, stride, k0, T, vs);
    __syncthreads();
    float sc[8][4], dp[8][4];
    product_abt<Dh>(qa, ks, sc);  // S
    product_abt<Dh>(da, vs, dp);  // dP = dO V^T
    #pragma unroll
    for (int nb = 0; nb < 8; ++nb)
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + nb * 8 + 2 * t + (i & 1);
        const float p = key <= row[i / 2] && key < T
                            ? __expf(sc[nb][i] * scale - row_lse[i / 2])
                            : 0.0f;
        dp[nb][i] = p * (dp[nb][i] - row_dot[i / 2]);
      }
    uint32_t pa[4][4];
    as_a(dp, pa);
    accumulate_pb<Dh>(dq, pa, kt_s);  // dQ += dS K
  }
  store_acc<Dh>(dq, scale, dqkv + static_cast<size_t>(b) * T * stride + h * Dh, stride, q0 + wr,
                T);
}

// Opts the kernel in to `bytes` of dynamic shared memory where it needs more than the default
// 48 KB; once per kernel and process (not a stream operation, so harmless inside a graph capture).
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    LS_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

template <int Dh>
void forward_dh(const AttentionShape& s, const float* qkv, float* out, float* lse,
                cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<Dh>(3);
  static const bool once = (allow_shared(flash_forward_kernel<Dh>, bytes), true);
  (void)once;
  const dim3 grid((s.seq + kTile - 1) / kTile, s.batch * s.heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  flash_forward_kernel<Dh><<<grid, kFlashThreads, bytes, stream>>>(s, scale, qkv, out, lse);
  LS_CHECK_LAUNCH("flash_forward_kernel");
}

template <int Dh>
void backward_dh(const AttentionShape& s, const float* qkv, const float* lse, const float* dout,
                 const float* dots, float* dqkv, cudaStream_t stream) {
  constexpr size_t kv_bytes = smem_bytes<Dh>(4), q_bytes = smem_bytes<Dh>(3);
  static const bool once = (allow_shared(flash_backward_kv_kernel<Dh>, kv_bytes),
                            allow_shared(flash_backward_q_kernel<Dh>, q_bytes), true);
  (void)once;
  const dim3 grid((s.seq + kTile - 1) / kTile, s.batch * s.heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  flash_backward_kv_kernel<Dh>
      <<<grid, kFlashThreads, kv_bytes, stream>>>(s, scale, qkv, dout, lse, dots, dqkv);
  LS_CHECK_LAUNCH("flash_backward_kv_kernel");
  flash_backward_q_kernel<Dh>
      <<<grid, kFlashThreads, q_bytes, stream>>>(s, scale, qkv, dout, lse, dots, dqkv);
  LS_CHECK_LAUNCH("flash_backward_q_kernel");
}

void check_flash(const AttentionShape& s, const float* qkv, const float* dout, const char* who) {
  check_attention_shape(s, who);
  if (!attention_flash_supported(s))
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(s.head_dim) +
                                " is not 16, 32, 64 or 128");
  const auto misaligned = [](const float* p) {
    return p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 != 0;
  };
  if (misaligned(qkv) || misaligned(dout))
    throw std::invalid_argument(std::string(who) + ": qkv and dout must start on 16 bytes");
}

}  // namespace

void attention_flash_forward_cuda(const AttentionShape& s, const float* qkv, float* out, float* lse,
                                  cudaStream_t stream) {
  check_flash(s, qkv, nullptr, "attention_flash_forward_cuda");
  if (s.batch == 0) return;
  switch (s.head_dim) {
    case 16: forward_dh<16>(s, qkv, out, lse, stream); break;
    case 32: forward_dh<32>(s, qkv, out, lse, stream); break;
    case 64: forward_dh<64>(s, qkv, out, lse, stream); break;
    default: forward_dh<128>(s, qkv, out, lse, stream); break;
  }
}

void attention_flash_backward_cuda(const AttentionShape& s, const float* qkv, const float* out,
                                   const float* lse, const float* dout, float* dqkv,
                                   float* workspace, cudaStream_t stream) {
  check_flash(s, qkv, dout, "attention_flash_backward_cuda");
  if (s.batch == 0) return;
  const size_t rows = attention_flash_lse_floats(s);
  row_dots_kernel<<<cuda::grid_for(rows * cuda::kWarp), cuda::kThreads, 0, stream>>>(s, dout, out,
                                                                                     workspace);
  LS_CHECK_LAUNCH("row_dots_kernel");
  switch (s.head_dim) {
    case 16: backward_dh<16>(s, qkv, lse, dout, workspace, dqkv, stream); break;
    case 32: backward_dh<32>(s, qkv, lse, dout, workspace, dqkv, stream); break;
    case 64: backward_dh<64>(s, qkv, lse, dout, workspace, dqkv, stream); break;
    default: backward_dh<128>(s, qkv, lse, dout, workspace, dqkv, stream); break;
  }
}

}  // namespace lockstep::kernels
