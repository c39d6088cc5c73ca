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
//   backward_q   per (query tile, ...): key tiles up to the diagonal: P, dP = dO V^T, dS, dQ += dS
//   K.
#include "kernels/gpt/attention_flash.cuh"

namespace lockstep::kernels {

namespace {

using namespace flash;

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
  bf16* kbuf = qs + kTileElems<Dh>;        // two K tiles
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

}  // namespace

void attention_flash_heads_cuda(const AttentionShape& s, const float* qkv, uint16_t* heads,
                                cudaStream_t stream) {
  check_attention_shape(s, "attention_flash_heads_cuda");
  if (s.channels() % 4 != 0)
    throw std::invalid_argument("attention_flash_heads_cuda: channels not a multiple of 4");
  if (s.batch == 0) return;
  const size_t quads = 3 * static_cast<size_t>(s.batch) * s.seq * s.channels() / 4;
  to_heads_kernel<<<cuda::grid_for(quads), cuda::kThreads, 0, stream>>>(s, qkv, heads);
  LS_CHECK_LAUNCH("to_heads_kernel");
}

void attention_flash_forward_cuda(const AttentionShape& s, const float* qkv, float* out,
                                  uint16_t* heads, float* lse, cudaStream_t stream) {
  check_flash(s, qkv, heads, out, "attention_flash_forward_cuda");
  if (s.batch == 0) return;
  attention_flash_heads_cuda(s, qkv, heads, stream);
  switch (s.head_dim) {
    case 16: forward_dh<16>(s, heads, out, lse, stream); break;
    case 32: forward_dh<32>(s, heads, out, lse, stream); break;
    case 64: forward_dh<64>(s, heads, out, lse, stream); break;
    default: forward_dh<128>(s, heads, out, lse, stream); break;
  }
}

}  // namespace lockstep::kernels
