#include <cmath>

#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/gemm.h"
#include "kernels/gpt/attention.h"

// The same steps as attention.cpp: gather the heads, batched products over the B * H heads with
// cublasSgemmStridedBatched, a masked softmax kernel (one block per score row), scatter back.

namespace lockstep::kernels {

namespace {

// [B, T, parts * C] <-> [parts, B, H, T, Dh], one thread per element of the head layout.
__global__ void to_heads_kernel(AttentionShape s, int parts, const float* packed, float* heads) {
  const int C = s.heads * s.head_dim, T = s.seq, Dh = s.head_dim;
  const size_t n = static_cast<size_t>(parts) * s.batch * T * C;
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const int d = static_cast<int>(i % Dh);
    size_t r = i / Dh;
    const int t = static_cast<int>(r % T);
    r /= T;
    const int h = static_cast<int>(r % s.heads);
    r /= s.heads;
    const int b = static_cast<int>(r % s.batch);
    const int p = static_cast<int>(r / s.batch);
    heads[i] = packed[(static_cast<size_t>(b) * T + t) * parts * C + p * C + h * Dh + d];
  }
}

__global__ void from_heads_kernel(AttentionShape s, int parts, const float* heads, float* packed) {
  const int C = s.heads * s.head_dim, T = s.seq, Dh = s.head_dim;
  const size_t n = static_cast<size_t>(parts) * s.batch * T * C;
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const int d = static_cast<int>(i % Dh);
    size_t r = i / Dh;
    const int t = static_cast<int>(r % T);
    r /= T;
    const int h = static_cast<int>(r % s.heads);
    r /= s.heads;
    const int b = static_cast<int>(r % s.batch);
    const int p = static_cast<int>(r / s.batch);
    packed[(static_cast<size_t>(b) * T + t) * parts * C + p * C + h * Dh + d] = heads[i];
  }
}

// Maximum over the block, returned to every thread; the same rules as cuda::block_sum.
__device__ float block_max(float v) {
  __shared__ float partial[cuda::kWarp];
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  for (int o = cuda::kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / cuda::kWarp) ? partial[lane] : -INFINITY;
  for (int o = cuda::kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

// One block per score row (b, h, t): softmax over columns 0..t in place, zeros after.
__global__ void causal_softmax_kernel(int T, float* scores) {
  const int t = static_cast<int>(blockIdx.x % T);
  float* row = scores + static_cast<size_t>(blockIdx.x) * T;
  float m = -INFINITY;
  for (int c = threadIdx.x; c <= t; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_max(m);
  float sum = 0.0f;
  for (int c = threadIdx.x; c <= t; c += blockDim.x) {
    const float e = expf(row[c] - m);
    row[c] = e;
    sum += e;
  }
  const float inv = 1.0f / cuda::block_sum(sum);
  for (int c = threadIdx.x; c < T; c += blockDim.x) row[c] = c <= t ? row[c] * inv : 0.0f;
}

// dscores = scale * p * (dp - sum(p * dp)) over columns 0..t, in place over dp; zeros after.
__global__ void causal_softmax_backward_kernel(int T, float scale, const float* probs,
                                               float* dprobs) {
  const int t = static_cast<int>(blockIdx.x % T);
  const float* p = probs + static_cast<size_t>(blockIdx.x) * T;
  float* dp = dprobs + static_cast<size_t>(blockIdx.x) * T;
  float dot = 0.0f;
  for (int c = threadIdx.x; c <= t; c += blockDim.x) dot += p[c] * dp[c];
  dot = cuda::block_sum(dot);
  for (int c = threadIdx.x; c < T; c += blockDim.x)
    dp[c] = c <= t ? scale * p[c] * (dp[c] - dot) : 0.0f;
}

void to_heads(const AttentionShape& s, int parts, const float* packed, float* heads,
              cudaStream_t stream) {
  const size_t n = static_cast<size_t>(parts) * s.batch * s.seq * s.channels();
  to_heads_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(s, parts, packed, heads);
  LS_CHECK_LAUNCH("to_heads_kernel");
}

void from_heads(const AttentionShape& s, int parts, const float* heads, float* packed,
                cudaStream_t stream) {
  const size_t n = static_cast<size_t>(parts) * s.batch * s.seq * s.channels();
  from_heads_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(s, parts, heads, packed);
  LS_CHECK_LAUNCH("from_heads_kernel");
}

// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for the B * H heads, through cuBLAS's
// column-major strided-batched GEMM: the same operand swap as gemm.cu (C^T = op(B)^T op(A)^T).
void gemm_per_head(const AttentionShape& s, const GemmShape& g, const float* a, size_t stride_a,
                   const float* b, size_t stride_b, float* c, size_t stride_c,
                   cudaStream_t stream) {
  const int lda = g.trans_a ? g.m : g.k, ldb = g.trans_b ? g.k : g.n;
  LS_CHECK_CUBLAS(cublasSgemmStridedBatched(
      cublas_handle(stream), g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m, g.k, &g.alpha, b, ldb,
      static_cast<long long>(stride_b), a, lda, static_cast<long long>(stride_a), &g.beta, c, g.n,
      static_cast<long long>(stride_c), s.batch * s.heads));
}

}  // namespace

void attention_forward_cuda(const AttentionShape& s, const float* qkv, float* out, float* heads,
                            float* probs, float* workspace, cudaStream_t stream) {
  check_attention_shape(s, "attention_forward_cuda");
  if (s.batch == 0) return;
  const int T = s.seq, Dh = s.head_dim;
  const size_t mat = static_cast<size_t>(T) * Dh, sq = static_cast<size_t>(T) * T;
  const size_t part = static_cast<size_t>(s.batch) * s.heads * mat;
  to_heads(s, 3, qkv, heads, stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  gemm_per_head(s, {.m = T, .n = T, .k = Dh, .trans_b = true, .alpha = scale}, heads, mat,
                heads + part, mat, probs, sq, stream);
  const unsigned rows = static_cast<unsigned>(static_cast<size_t>(s.batch) * s.heads * T);
  causal_softmax_kernel<<<rows, cuda::threads_for_row(T), 0, stream>>>(T, probs);
  LS_CHECK_LAUNCH("causal_softmax_kernel");
  gemm_per_head(s, {.m = T, .n = Dh, .k = T}, probs, sq, heads + 2 * part, mat, workspace, mat,
                stream);
  from_heads(s, 1, workspace, out, stream);
}

void attention_backward_cuda(const AttentionShape& s, const float* dout, const float* heads,
                             const float* probs, float* dqkv, float* workspace,
                             cudaStream_t stream) {
  check_attention_shape(s, "attention_backward_cuda");
  if (s.batch == 0) return;
  const int T = s.seq, Dh = s.head_dim;
  const size_t mat = static_cast<size_t>(T) * Dh, sq = static_cast<size_t>(T) * T;
  const size_t part = static_cast<size_t>(s.batch) * s.heads * mat;
  const float* q = heads;
  const float* k = heads + part;
  const float* v = heads + 2 * part;
  float* dyh = workspace;
  float* dheads = dyh + part;
  float* dprobs = dheads + 3 * part;
  to_heads(s, 1, dout, dyh, stream);
  gemm_per_head(s, {.m = T, .n = T, .k = Dh, .trans_b = true}, dyh, mat, v, mat, dprobs, sq,
                stream);
  gemm_per_head(s, {.m = T, .n = Dh, .k = T, .trans_a = true}, probs, sq, dyh, mat,
                dheads + 2 * part, mat, stream);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  const unsigned rows = static_cast<unsigned>(static_cast<size_t>(s.batch) * s.heads * T);
  causal_softmax_backward_kernel<<<rows, cuda::threads_for_row(T), 0, stream>>>(T, scale, probs,
                                                                                dprobs);
  LS_CHECK_LAUNCH("causal_softmax_backward_kernel");
  gemm_per_head(s, {.m = T, .n = Dh, .k = T}, dprobs, sq, k, mat, dheads, mat, stream);
  gemm_per_head(s, {.m = T, .n = Dh, .k = T, .trans_a = true}, dprobs, sq, q, mat, dheads + part,
                mat, stream);
  from_heads(s, 3, dheads, dqkv, stream);
}

}  // namespace lockstep::kernels
