// Flash-style causal attention on the tensor cores (attention_flash.h), after FlashAttention-2's
// arithmetic (Dao, 2023: online softmax, backward recomputing the probabilities from the saved
// log-sum-exp). Thread blocks of 4 warps own 64 rows of a tile, 16 rows per warp; the products are
// PTX mma.sync m16n8k16 on bf16 operands with fp32 accumulators, whose register layout the PTX ISA
// documents (thread lane = 4 g + t holds rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8
// accumulator tile), so the softmax runs on the accumulators in registers and the probabilities
// become the next product's A operand without leaving them.
//
// The forward pass first rounds qkv to bf16 once, head by head ([3][B * H][T][Dh], the `heads`
// buffer the backward pass reads); the output gradient is rounded the same way by the kernel that
// computes D = dout . out. Tiles then travel as bf16 with cp.async (16 bytes a thread, rows past T
// zero-filled) into shared memory, double-buffered so the next tile loads while this one is
// multiplied, row-major with a pitch of Dh + 8 (conflict-free fragment loads); an operand read
// along its columns comes through ldmatrix .trans.
//   forward      per (query tile, batch x head): Q fragments in registers, key tiles streamed up to
//                the diagonal; out = O / l, lse = m + log l.
//   row_dots     D[row] = dout . out over the head's columns (one warp per row), dout to bf16.
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

// Shared memory: `tiles` bf16 tiles [64][Dh + 8], then `rows` fp32 vectors of 64.
template <int Dh>
constexpr int kTileElems = kTile * (Dh + 8);
template <int Dh>
constexpr size_t smem_bytes(int tiles, int rows) {
  return tiles * sizeof(bf16) * kTileElems<Dh> + rows * kTile * sizeof(float);
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

// Four 8 x 8 bf16 matrices from shared memory, transposed: lanes 8i .. 8i + 7 give the row
// addresses of matrix i; r[i] then holds that matrix's elements (2t, g) and (2t + 1, g).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// 16 bytes global -> shared without passing through registers; `valid` false fills zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t word(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The A fragment of rows r0.., columns k0.. of a row-major bf16 tile.
template <int Dh>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int k0) {
  constexpr int ld = Dh + 8;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const bf16* p = tile + (r0 + g) * ld + k0 + 2 * t;
  a[0] = word(p);
  a[1] = word(p + 8 * ld);
  a[2] = word(p + 8);
  a[3] = word(p + 8 * ld + 8);
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

// s[nb] = A M^T for the warp's 16 rows and the tile's 64 rows: A as Dh / 16 fragments, M a
// row-major [64][Dh + 8] tile (its rows are B's columns, read as 32-bit words).
template <int Dh>
__device__ __forceinline__ void product_abt(const uint32_t (&a)[Dh / 16][4], const bf16* tile,
                                            float (&s)[8][4]) {
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nb = 0; nb < 8; ++nb) {
    s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
    const bf16* row = tile + (nb * 8 + g) * (Dh + 8) + 2 * t;
#pragma unroll
    for (int k = 0; k < Dh / 16; ++k) mma(s[nb], a[k], word(row + k * 16), word(row + k * 16 + 8));
  }
}

// acc[nd] += P M for the warp's rows: P as 4 fragments over the tile's 64 rows, M the row-major
// [64][Dh + 8] tile (read down its columns through ldmatrix .trans).
template <int Dh>
__device__ __forceinline__ void accumulate_pm(float (&acc)[Dh / 8][4], const uint32_t (&p)[4][4],
                                              const bf16* tile) {
  const int lane = threadIdx.x % cuda::kWarp, mi = lane / 8, ri = lane % 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int nd2 = 0; nd2 < Dh / 16; ++nd2) {
      uint32_t b[4];
      ldsm_x4_trans(b, tile + (kk * 16 + ri + (mi & 1) * 8) * (Dh + 8) + nd2 * 16 + (mi >> 1) * 8);
      mma(acc[2 * nd2], p[kk], b[0], b[1]);
      mma(acc[2 * nd2 + 1], p[kk], b[2], b[3]);
    }
}

// Starts loading rows r0 .. r0 + 63 of a head's [T][Dh] bf16 matrix into a [64][Dh + 8] tile.
template <int Dh>
__device__ __forceinline__ void load_tile(const uint16_t* head, int r0, int T, bf16* tile) {
  constexpr int chunks = Dh / 8;  // 16 bytes each
#pragma unroll
  for (int i = threadIdx.x; i < kTile * chunks; i += kFlashThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bool valid = r0 + r < T;
    cp_async16(tile + r * (Dh + 8) + c, head + static_cast<size_t>(valid ? r0 + r : 0) * Dh + c,
               valid);
  }
}

// Per-row values r0 .. r0 + 63 of src (zeros at or past T) into dst.
__device__ __forceinline__ void load_rows(const float* src, int r0, int T, float* dst) {
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

// qkv [B, T, 3C] fp32 -> heads [3][B * H][T][Dh] bf16, four values a thread.
__global__ void to_heads_kernel(AttentionShape s, const float* qkv, uint16_t* heads) {
  const int Dh = s.head_dim, T = s.seq, C = s.heads * s.head_dim;
  const size_t quads = static_cast<size_t>(s.batch) * T * 3 * C / 4;
  const size_t bh_count = static_cast<size_t>(s.batch) * s.heads;
  for (size_t i = cuda::thread_index(); i < quads; i += cuda::thread_stride()) {
    const size_t at = i * 4, row = at / (3 * C);
    const int col = static_cast<int>(at % (3 * C)), p = col / C, h = (col % C) / Dh, d = col % Dh;
    const size_t b = row / T, t = row % T;
    const float4 v = *reinterpret_cast<const float4*>(qkv + at);
    uint2 w;
    w.x = pack(v.x, v.y);
    w.y = pack(v.z, v.w);
    *reinterpret_cast<uint2*>(heads + ((p * bh_count + b * s.heads + h) * T + t) * Dh + d) = w;
  }
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(AttentionShape s, float scale, const uint16_t* heads, float* out,
                         float* lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* kbuf = qs + kTileElems<Dh>;       // two K tiles
  bf16* vbuf = kbuf + 2 * kTileElems<Dh>;  // two V tiles
  const int T = s.seq, C = s.heads * s.head_dim;
  const int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, wr = (threadIdx.x / cuda::kWarp) * 16;
  const size_t head = static_cast<size_t>(T) * Dh, part = static_cast<size_t>(gridDim.y) * head;
  const uint16_t* qh = heads + bh * head;
  const uint16_t* kh = qh + part;
  const uint16_t* vh = kh + part;

  load_tile<Dh>(qh, q0, T, qs);
  load_tile<Dh>(kh, 0, T, kbuf);
  load_tile<Dh>(vh, 0, T, vbuf);
  cp_async_commit();
  uint32_t qa[Dh / 16][4];
  float o[Dh / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row[2] = {q0 + wr + g, q0 + wr + g + 8};

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile, cur = kt & 1;
    if (kt < qt) {  // the next tile loads while this one is multiplied
      load_tile<Dh>(kh, k0 + kTile, T, kbuf + (cur ^ 1) * kTileElems<Dh>);
      load_tile<Dh>(vh, k0 + kTile, T, vbuf + (cur ^ 1) * kTileElems<Dh>);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int k = 0; k < Dh / 16; ++k) load_a<Dh>(qa[k], qs, wr, k * 16);
    }
    float sc[8][4];
    product_abt<Dh>(qa, kbuf + cur * kTileElems<Dh>, sc);
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
    accumulate_pm<Dh>(o, pa, vbuf + cur * kTileElems<Dh>);
    __syncthreads();  // every warp done with this tile before it is overwritten
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

// dots[(b * H + h) * T + t] = sum over the head's columns of dout * out, and dout to bf16 by head
// (d16 [B * H][T][Dh]); one warp per row.
__global__ void row_dots_kernel(AttentionShape s, const float* dout, const float* out, float* dots,
                                uint16_t* d16) {
  const int Dh = s.head_dim, T = s.seq, C = s.heads * s.head_dim;
  const size_t rows = static_cast<size_t>(s.batch) * s.heads * T;
  const size_t warps = size_t(gridDim.x) * (blockDim.x / cuda::kWarp);
  const int lane = threadIdx.x % cuda::kWarp;
  for (size_t w = cuda::thread_index() / cuda::kWarp; w < rows; w += warps) {
    const size_t t = w % T, bh = w / T, b = bh / s.heads, h = bh % s.heads;
    const size_t at = (b * T + t) * C + h * Dh;
    float v = 0.0f;
    for (int d = 2 * lane; d < Dh; d += 2 * cuda::kWarp) {
      const float2 x = *reinterpret_cast<const float2*>(dout + at + d);
      const float2 y = *reinterpret_cast<const float2*>(out + at + d);
      v += x.x * y.x + x.y * y.y;
      *reinterpret_cast<uint32_t*>(d16 + w * Dh + d) = pack(x.x, x.y);
    }
    v = cuda::warp_sum(v);
    if (lane == 0) dots[w] = v;
  }
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kv_kernel(AttentionShape s, float scale, const uint16_t* heads,
                             const uint16_t* d16, const float* lse, const float* dots,
                             float* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qbuf = reinterpret_cast<bf16*>(smem);  // two Q tiles; K and V at first
  bf16* dbuf = qbuf + 2 * kTileElems<Dh>;      // two dO tiles
  float* lse_s = reinterpret_cast<float*>(dbuf + 2 * kTileElems<Dh>);  // two of each
  float* dd_s = lse_s + 2 * kTile;
  const int T = s.seq, C = s.heads * s.head_dim, tiles = (T + kTile - 1) / kTile;
  const int kt = gridDim.x - 1 - blockIdx.x;  // the first keys (the most query tiles) first
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const int k0 = kt * kTile, wr = (threadIdx.x / cuda::kWarp) * 16;
  const size_t head = static_cast<size_t>(T) * Dh, part = static_cast<size_t>(gridDim.y) * head;
  const uint16_t* qh = heads + bh * head;
  const uint16_t* dh = d16 + bh * head;
  const float* lse_h = lse + static_cast<size_t>(bh) * T;
  const float* dots_h = dots + static_cast<size_t>(bh) * T;

  load_tile<Dh>(qh + part, k0, T, qbuf + kTileElems<Dh>);      // K
  load_tile<Dh>(qh + 2 * part, k0, T, dbuf + kTileElems<Dh>);  // V
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t ka[Dh / 16][4], va[Dh / 16][4];
#pragma unroll
  for (int k = 0; k < Dh / 16; ++k) {
    load_a<Dh>(ka[k], qbuf + kTileElems<Dh>, wr, k * 16);
    load_a<Dh>(va[k], dbuf + kTileElems<Dh>, wr, k * 16);
  }
  __syncthreads();  // K and V read before those tiles are reused
  load_tile<Dh>(qh, k0, T, qbuf);
  load_tile<Dh>(dh, k0, T, dbuf);
  cp_async_commit();
  load_rows(lse_h, k0, T, lse_s);
  load_rows(dots_h, k0, T, dd_s);
  float dk[Dh / 8][4] = {}, dv[Dh / 8][4] = {};
  const int key[2] = {k0 + wr + g, k0 + wr + g + 8};
  for (int qt = kt; qt < tiles; ++qt) {
    const int q0 = qt * kTile, cur = (qt - kt) & 1, nxt = cur ^ 1;
    if (qt + 1 < tiles) {
      load_tile<Dh>(qh, q0 + kTile, T, qbuf + nxt * kTileElems<Dh>);
      load_tile<Dh>(dh, q0 + kTile, T, dbuf + nxt * kTileElems<Dh>);
      cp_async_commit();
      load_rows(lse_h, q0 + kTile, T, lse_s + nxt * kTile);
      load_rows(dots_h, q0 + kTile, T, dd_s + nxt * kTile);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* qs = qbuf + cur * kTileElems<Dh>;
    const bf16* ds = dbuf + cur * kTileElems<Dh>;
    const float* lq = lse_s + cur * kTile;
    const float* dq = dd_s + cur * kTile;
    float st[8][4], dpt[8][4];
    product_abt<Dh>(ka, qs, st);   // S^T: keys x queries
    product_abt<Dh>(va, ds, dpt);  // dP^T = V dO^T
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = nb * 8 + 2 * t + (i & 1), query = q0 + c;
        const float p = key[i / 2] <= query && query < T && key[i / 2] < T
                            ? __expf(st[nb][i] * scale - lq[c])
                            : 0.0f;
        st[nb][i] = p;
        dpt[nb][i] = p * (dpt[nb][i] - dq[c]);
      }
    uint32_t pa[4][4];
    as_a(st, pa);
    accumulate_pm<Dh>(dv, pa, ds);  // dV += P^T dO
    as_a(dpt, pa);
    accumulate_pm<Dh>(dk, pa, qs);  // dK += dS^T Q
    __syncthreads();  // every warp done with this tile before it is overwritten
  }
  float* dst = dqkv + static_cast<size_t>(b) * T * 3 * C + h * Dh;
  store_acc<Dh>(dk, scale, dst + C, 3 * static_cast<size_t>(C), k0 + wr, T);
  store_acc<Dh>(dv, 1.0f, dst + 2 * C, 3 * static_cast<size_t>(C), k0 + wr, T);
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q_kernel(AttentionShape s, float scale, const uint16_t* heads,
                            const uint16_t* d16, const float* lse, const float* dots,
                            float* dqkv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* kbuf = reinterpret_cast<bf16*>(smem);  // two K tiles; Q at first
  bf16* vbuf = kbuf + 2 * kTileElems<Dh>;      // two V tiles; dO at first
  const int T = s.seq, C = s.heads * s.head_dim;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / s.heads, h = bh % s.heads;
  const int lane = threadIdx.x % cuda::kWarp, g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, wr = (threadIdx.x / cuda::kWarp) * 16;
  const size_t head = static_cast<size_t>(T) * Dh, part = static_cast<size_t>(gridDim.y) * head;
  const uint16_t* qh = heads + bh * head;
  const uint16_t* kh = qh + part;
  const uint16_t* vh = kh + part;

  load_tile<Dh>(qh, q0, T, kbuf + kTileElems<Dh>);
  load_tile<Dh>(d16 + bh * head, q0, T, vbuf + kTileElems<Dh>);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qa[Dh / 16][4], da[Dh / 16][4];
#pragma unroll
  for (int k = 0; k < Dh / 16; ++k) {
    load_a<Dh>(qa[k], kbuf + kTileElems<Dh>, wr, k * 16);
    load_a<Dh>(da[k], vbuf + kTileElems<Dh>, wr, k * 16);
  }
  __syncthreads();  // Q and dO read before those tiles are reused
  load_tile<Dh>(kh, 0, T, kbuf);
  load_tile<Dh>(vh, 0, T, vbuf);
  cp_async_commit();
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
    const int k0 = kt * kTile, cur = kt & 1;
    if (kt < qt) {
      load_tile<Dh>(kh, k0 + kTile, T, kbuf + (cur ^ 1) * kTileElems<Dh>);
      load_tile<Dh>(vh, k0 + kTile, T, vbuf + (cur ^ 1) * kTileElems<Dh>);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* ks = kbuf + cur * kTileElems<Dh>;
    float sc[8][4], dp[8][4];
    product_abt<Dh>(qa, ks, sc);                              // S
    product_abt<Dh>(da, vbuf + cur * kTileElems<Dh>, dp);     // dP = dO V^T
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
    accumulate_pm<Dh>(dq, pa, ks);  // dQ += dS K
    __syncthreads();  // every warp done with this tile before it is overwritten
  }
  store_acc<Dh>(dq, scale, dqkv + static_cast<size_t>(b) * T * 3 * C + h * Dh,
                3 * static_cast<size_t>(C), q0 + wr, T);
}

// Opts the kernel in to `bytes` of dynamic shared memory where it needs more than the default
// 48 KB; once per kernel and process (not a stream operation, so harmless inside a graph capture).
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    LS_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

dim3 flash_grid(const AttentionShape& s) {
  return dim3((s.seq + kTile - 1) / kTile, static_cast<unsigned>(s.batch * s.heads));
}

template <int Dh>
void forward_dh(const AttentionShape& s, const uint16_t* heads, float* out, float* lse,
                cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<Dh>(5, 0);
  static const bool once = (allow_shared(flash_forward_kernel<Dh>, bytes), true);
  (void)once;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  flash_forward_kernel<Dh>
      <<<flash_grid(s), kFlashThreads, bytes, stream>>>(s, scale, heads, out, lse);
  LS_CHECK_LAUNCH("flash_forward_kernel");
}

template <int Dh>
void backward_dh(const AttentionShape& s, const uint16_t* heads, const uint16_t* d16,
                 const float* lse, const float* dots, float* dqkv, cudaStream_t stream) {
  constexpr size_t kv_bytes = smem_bytes<Dh>(4, 4), q_bytes = smem_bytes<Dh>(4, 0);
  static const bool once = (allow_shared(flash_backward_kv_kernel<Dh>, kv_bytes),
                            allow_shared(flash_backward_q_kernel<Dh>, q_bytes), true);
  (void)once;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  flash_backward_kv_kernel<Dh>
      <<<flash_grid(s), kFlashThreads, kv_bytes, stream>>>(s, scale, heads, d16, lse, dots, dqkv);
  LS_CHECK_LAUNCH("flash_backward_kv_kernel");
  flash_backward_q_kernel<Dh>
      <<<flash_grid(s), kFlashThreads, q_bytes, stream>>>(s, scale, heads, d16, lse, dots, dqkv);
  LS_CHECK_LAUNCH("flash_backward_q_kernel");
}

void check_flash(const AttentionShape& s, const void* a, const void* b, const void* c,
                 const char* who) {
  check_attention_shape(s, who);
  if (!attention_flash_supported(s))
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(s.head_dim) +
                                " is not 16, 32, 64 or 128");
  for (const void* p : {a, b, c})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(std::string(who) + ": buffers must start on 16 bytes");
}

}  // namespace

void attention_flash_forward_cuda(const AttentionShape& s, const float* qkv, float* out,
                                  uint16_t* heads, float* lse, cudaStream_t stream) {
  check_flash(s, qkv, heads, out, "attention_flash_forward_cuda");
  if (s.batch == 0) return;
  const size_t quads = 3 * static_cast<size_t>(s.batch) * s.seq * s.channels() / 4;
  to_heads_kernel<<<cuda::grid_for(quads), cuda::kThreads, 0, stream>>>(s, qkv, heads);
  LS_CHECK_LAUNCH("to_heads_kernel");
  switch (s.head_dim) {
    case 16: forward_dh<16>(s, heads, out, lse, stream); break;
    case 32: forward_dh<32>(s, heads, out, lse, stream); break;
    case 64: forward_dh<64>(s, heads, out, lse, stream); break;
    default: forward_dh<128>(s, heads, out, lse, stream); break;
  }
}

void attention_flash_backward_cuda(const AttentionShape& s, const uint16_t* heads,
                                   const float* out, const float* lse, const float* dout,
                                   float* dqkv, float* workspace, cudaStream_t stream) {
  check_flash(s, heads, dout, workspace, "attention_flash_backward_cuda");
  if (s.batch == 0) return;
  const size_t rows = attention_flash_lse_floats(s);
  float* dots = workspace;
  uint16_t* d16 = reinterpret_cast<uint16_t*>(workspace + (rows + 3) / 4 * 4);
  row_dots_kernel<<<cuda::grid_for(rows * cuda::kWarp), cuda::kThreads, 0, stream>>>(
      s, dout, out, dots, d16);
  LS_CHECK_LAUNCH("row_dots_kernel");
  switch (s.head_dim) {
    case 16: backward_dh<16>(s, heads, d16, lse, dots, dqkv, stream); break;
    case 32: backward_dh<32>(s, heads, d16, lse, dots, dqkv, stream); break;
    case 64: backward_dh<64>(s, heads, d16, lse, dots, dqkv, stream); break;
    default: backward_dh<128>(s, heads, d16, lse, dots, dqkv, stream); break;
  }
}

}  // namespace lockstep::kernels
