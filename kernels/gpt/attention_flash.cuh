// The flash attention kernels' shared pieces (attention_flash.cu: forward;
// attention_flash_backward.cu: backward), for those two files only: the tile geometry, the PTX
// mma.sync / ldmatrix / cp.async wrappers and the fragment helpers, and the launchers' checks.
// The arithmetic, the register layout and the passes are described in attention_flash.cu.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/attention_flash.h"

namespace lockstep::kernels::flash {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                // rows of a query or key tile
constexpr int kFlashWarps = kTile / 16;  // one warp per 16 rows
constexpr int kFlashThreads = kFlashWarps * cuda::kWarp;

// Shared memory: `tiles` bf16 tiles [64][Dh + 8], then `rows` fp32 vectors of 64.
template <int Dh>
constexpr int kTileElems = kTile*(Dh + 8);
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
// Rows r0 .. r0 + 63 of two heads' [T][Dh] matrices through the second tile of abuf and bbuf into
// the warp's A fragments fa and fb (its 16 rows from wr); both tiles are free again on return.
template <int Dh>
__device__ __forceinline__ void fragments_of_two(const uint16_t* a_head, const uint16_t* b_head,
                                                 int r0, int T, bf16* abuf, bf16* bbuf, int wr,
                                                 uint32_t (&fa)[Dh / 16][4],
                                                 uint32_t (&fb)[Dh / 16][4]) {
  load_tile<Dh>(a_head, r0, T, abuf + kTileElems<Dh>);
  load_tile<Dh>(b_head, r0, T, bbuf + kTileElems<Dh>);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int k = 0; k < Dh / 16; ++k) {
    load_a<Dh>(fa[k], abuf + kTileElems<Dh>, wr, k * 16);
    load_a<Dh>(fb[k], bbuf + kTileElems<Dh>, wr, k * 16);
  }
  __syncthreads();  // both read before those tiles are reused
}

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

// Opts the kernel in to `bytes` of dynamic shared memory where it needs more than the default
// 48 KB; once per kernel and process (not a stream operation, so harmless inside a graph capture).
template <class Kernel>
inline void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    LS_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

inline dim3 flash_grid(const AttentionShape& s) {
  return dim3((s.seq + kTile - 1) / kTile, static_cast<unsigned>(s.batch * s.heads));
}

inline void check_flash(const AttentionShape& s, const void* a, const void* b, const void* c,
                        const char* who) {
  check_attention_shape(s, who);
  if (!attention_flash_supported(s))
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(s.head_dim) +
                                " is not 16, 32, 64 or 128");
  for (const void* p : {a, b, c})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(std::string(who) + ": buffers must start on 16 bytes");
}

}  // namespace lockstep::kernels::flash
