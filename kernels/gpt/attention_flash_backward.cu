// The backward pass of the flash attention (attention_flash.h; the arithmetic and the passes are
// described in attention_flash.cu): row_dots, then the key/value kernel and the query kernel.
#include "kernels/gpt/attention_flash.cuh"

namespace lockstep::kernels {

namespace {

using namespace flash;

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

  uint32_t ka[Dh / 16][4], va[Dh / 16][4];
  fragments_of_two<Dh>(qh + part, qh + 2 * part, k0, T, qbuf, dbuf, wr, ka, va);  // K, V
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
    __syncthreads();                // every warp done with this tile before it is overwritten
  }
  float* dst = dqkv + static_cast<size_t>(b) * T * 3 * C + h * Dh;
  store_acc<Dh>(dk, scale, dst + C, 3 * static_cast<size_t>(C), k0 + wr, T);
  store_acc<Dh>(dv, 1.0f, dst + 2 * C, 3 * static_cast<size_t>(C), k0 + wr, T);
}

template <int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q_kernel(AttentionShape s, float scale, const uint16_t* heads,
                            const uint16_t* d16, const float* lse, const float* dots, float* dqkv) {
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

  uint32_t qa[Dh / 16][4], da[Dh / 16][4];
  fragments_of_two<Dh>(qh, d16 + bh * head, q0, T, kbuf, vbuf, wr, qa, da);  // Q, dO
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
    product_abt<Dh>(qa, ks, sc);                           // S
    product_abt<Dh>(da, vbuf + cur * kTileElems<Dh>, dp);  // dP = dO V^T
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + nb * 8 + 2 * t + (i & 1);
        const float p =
            key <= row[i / 2] && key < T ? __expf(sc[nb][i] * scale - row_lse[i / 2]) : 0.0f;
        dp[nb][i] = p * (dp[nb][i] - row_dot[i / 2]);
      }
    uint32_t pa[4][4];
    as_a(dp, pa);
    accumulate_pm<Dh>(dq, pa, ks);  // dQ += dS K
    __syncthreads();                // every warp done with this tile before it is overwritten
  }
  store_acc<Dh>(dq, scale, dqkv + static_cast<size_t>(b) * T * 3 * C + h * Dh,
                3 * static_cast<size_t>(C), q0 + wr, T);
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

}  // namespace

void attention_flash_backward_cuda(const AttentionShape& s, const uint16_t* heads, const float* out,
                                   const float* lse, const float* dout, float* dqkv,
                                   float* workspace, cudaStream_t stream) {
  check_flash(s, heads, dout, workspace, "attention_flash_backward_cuda");
  if (s.batch == 0) return;
  const size_t rows = attention_flash_lse_floats(s);
  float* dots = workspace;
  uint16_t* d16 = reinterpret_cast<uint16_t*>(workspace + (rows + 3) / 4 * 4);
  row_dots_kernel<<<cuda::grid_for(rows * cuda::kWarp), cuda::kThreads, 0, stream>>>(s, dout, out,
                                                                                     dots, d16);
  LS_CHECK_LAUNCH("row_dots_kernel");
  switch (s.head_dim) {
    case 16: backward_dh<16>(s, heads, d16, lse, dots, dqkv, stream); break;
    case 32: backward_dh<32>(s, heads, d16, lse, dots, dqkv, stream); break;
    case 64: backward_dh<64>(s, heads, d16, lse, dots, dqkv, stream); break;
    default: backward_dh<128>(s, heads, d16, lse, dots, dqkv, stream); break;
  }
}

}  // namespace lockstep::kernels
