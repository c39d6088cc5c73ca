#include "kernels/gpt/attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/gemm.h"
#include "kernels/gpt/attention_cudnn.h"
#include "kernels/gpt/attention_flash.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {

void check_attention_shape(const AttentionShape& s, const char* who) {
  if (s.batch < 0 || s.seq <= 0 || s.heads <= 0 || s.head_dim <= 0)
    throw std::invalid_argument(std::string(who) +
                                ": batch must be >= 0 and seq, heads, head_dim > 0");
}

size_t attention_heads_floats(const AttentionShape& s) {
  return 3 * static_cast<size_t>(s.batch) * s.seq * s.channels();
}
size_t attention_probs_floats(const AttentionShape& s) {
  return static_cast<size_t>(s.batch) * s.heads * s.seq * s.seq;
}
size_t attention_workspace_floats(const AttentionShape& s) {
  return 4 * static_cast<size_t>(s.batch) * s.seq * s.channels() + attention_probs_floats(s);
}

// The flash kernels' shape rules and sizes (attention_flash.h), here so that every build has them.
bool attention_flash_supported(const AttentionShape& s) {
  return s.head_dim == 16 || s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128;
}
size_t attention_flash_heads_floats(const AttentionShape& s) {
  return (3 * static_cast<size_t>(s.batch) * s.seq * s.channels() + 1) / 2;
}
size_t attention_flash_lse_floats(const AttentionShape& s) {
  return static_cast<size_t>(s.batch) * s.heads * s.seq;
}
// The row dots, rounded up to 16 bytes, then dout in bf16.
size_t attention_flash_workspace_floats(const AttentionShape& s) {
  return (attention_flash_lse_floats(s) + 3) / 4 * 4 +
         (static_cast<size_t>(s.batch) * s.seq * s.channels() + 1) / 2;
}

// The cuDNN attention's sizes (attention_cudnn.h), here for the same reason: Q, K, V and the
// output in bf16; dout and dQ, dK, dV in bf16.
size_t attention_cudnn_heads_floats(const AttentionShape& s) {
  return 2 * static_cast<size_t>(s.batch) * s.seq * s.channels();
}
size_t attention_cudnn_lse_floats(const AttentionShape& s) { return attention_flash_lse_floats(s); }
size_t attention_cudnn_workspace_floats(const AttentionShape& s) {
  return 2 * static_cast<size_t>(s.batch) * s.seq * s.channels();
}

namespace {

// [B, T, parts * C] <-> [parts, B, H, T, Dh]: to_heads gathers the packed columns into one
// contiguous [T, Dh] matrix per (part, b, h); from_heads scatters them back.
void to_heads(const AttentionShape& s, int parts, const float* packed, float* heads) {
  const int C = s.channels(), T = s.seq, Dh = s.head_dim;
  for (int p = 0; p < parts; ++p) {
    LS_PARALLEL_FOR
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.heads; ++h)
        for (int t = 0; t < T; ++t) {
          const float* src = packed + (static_cast<size_t>(b) * T + t) * parts * C + p * C + h * Dh;
          float* dst =
              heads + (((static_cast<size_t>(p) * s.batch + b) * s.heads + h) * T + t) * Dh;
          std::copy_n(src, Dh, dst);
        }
  }
}

void from_heads(const AttentionShape& s, int parts, const float* heads, float* packed) {
  const int C = s.channels(), T = s.seq, Dh = s.head_dim;
  for (int p = 0; p < parts; ++p) {
    LS_PARALLEL_FOR
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.heads; ++h)
        for (int t = 0; t < T; ++t) {
          const float* src =
              heads + (((static_cast<size_t>(p) * s.batch + b) * s.heads + h) * T + t) * Dh;
          float* dst = packed + (static_cast<size_t>(b) * T + t) * parts * C + p * C + h * Dh;
          std::copy_n(src, Dh, dst);
        }
  }
}

using GemmFn = void (*)(const GemmShape&, const float*, const float*, float*);

// One GEMM per head: the B * H matrices of each operand lie `stride_*` floats apart. The oneDNN
// products spread over the threads, one head each (a product inside the parallel loop runs on its
// thread alone); OpenBLAS, with threads of its own, gets them one by one.
void gemm_per_head(GemmFn gemm, const AttentionShape& s, const GemmShape& g, const float* a,
                   size_t stride_a, const float* b, size_t stride_b, float* c, size_t stride_c) {
  const long count = static_cast<long>(s.batch) * s.heads;
  if (gemm == gemm_cpu) {
    for (long i = 0; i < count; ++i) gemm(g, a + i * stride_a, b + i * stride_b, c + i * stride_c);
    return;
  }
  LS_PARALLEL_FOR
  for (long i = 0; i < count; ++i) gemm(g, a + i * stride_a, b + i * stride_b, c + i * stride_c);
}

// Row t of a [T, T] score matrix: softmax over columns 0..t, zeros after.
void causal_softmax_row(float* row, int t, int T) {
  float m = row[0];
  for (int c = 1; c <= t; ++c) m = std::max(m, row[c]);
  double sum = 0;
  for (int c = 0; c <= t; ++c) {
    row[c] = std::exp(row[c] - m);
    sum += row[c];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int c = 0; c <= t; ++c) row[c] *= inv;
  std::fill(row + t + 1, row + T, 0.0f);
}

// d(scores)[t, c] = scale * p[t, c] * (dp[t, c] - sum_c' p[t, c'] dp[t, c']), in place over dp;
// zero above the diagonal (masked scores get no gradient).
void causal_softmax_backward_row(const float* p, float* dp, int t, int T, float scale) {
  double dot = 0;
  for (int c = 0; c <= t; ++c) dot += static_cast<double>(p[c]) * dp[c];
  const float d = static_cast<float>(dot);
  for (int c = 0; c <= t; ++c) dp[c] = scale * p[c] * (dp[c] - d);
  std::fill(dp + t + 1, dp + T, 0.0f);
}

void forward(GemmFn gemm, const AttentionShape& s, const float* qkv, float* out, float* heads,
             float* probs, float* workspace) {
  if (s.batch == 0) return;
  const int T = s.seq, Dh = s.head_dim;
  const size_t mat = static_cast<size_t>(T) * Dh, sq = static_cast<size_t>(T) * T;
  const size_t part = static_cast<size_t>(s.batch) * s.heads * mat;
  const float* q = heads;
  const float* k = heads + part;
  const float* v = heads + 2 * part;
  float* yh = workspace;  // [B, H, T, Dh]
  to_heads(s, 3, qkv, heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  gemm_per_head(gemm, s, {.m = T, .n = T, .k = Dh, .trans_b = true, .alpha = scale}, q, mat, k, mat,
                probs, sq);
  const size_t rows = static_cast<size_t>(s.batch) * s.heads * T;
  LS_PARALLEL_FOR
  for (size_t r = 0; r < rows; ++r) causal_softmax_row(probs + r * T, static_cast<int>(r % T), T);
  gemm_per_head(gemm, s, {.m = T, .n = Dh, .k = T}, probs, sq, v, mat, yh, mat);
  from_heads(s, 1, yh, out);
}

void backward(GemmFn gemm, const AttentionShape& s, const float* dout, const float* heads,
              const float* probs, float* dqkv, float* workspace) {
  if (s.batch == 0) return;
  const int T = s.seq, Dh = s.head_dim;
  const size_t mat = static_cast<size_t>(T) * Dh, sq = static_cast<size_t>(T) * T;
  const size_t part = static_cast<size_t>(s.batch) * s.heads * mat;
  const float* q = heads;
  const float* k = heads + part;
  const float* v = heads + 2 * part;
  float* dyh = workspace;             // [B, H, T, Dh]
  float* dheads = dyh + part;         // [3, B, H, T, Dh]: dq, dk, dv
  float* dprobs = dheads + 3 * part;  // [B, H, T, T]
  to_heads(s, 1, dout, dyh);
  // dprobs = dy v^T;  dv = att^T dy
  gemm_per_head(gemm, s, {.m = T, .n = T, .k = Dh, .trans_b = true}, dyh, mat, v, mat, dprobs, sq);
  gemm_per_head(gemm, s, {.m = T, .n = Dh, .k = T, .trans_a = true}, probs, sq, dyh, mat,
                dheads + 2 * part, mat);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  const size_t rows = static_cast<size_t>(s.batch) * s.heads * T;
  LS_PARALLEL_FOR
  for (size_t r = 0; r < rows; ++r)
    causal_softmax_backward_row(probs + r * T, dprobs + r * T, static_cast<int>(r % T), T, scale);
  // dq = dscores k;  dk = dscores^T q  (dscores already carries the 1/sqrt(Dh))
  gemm_per_head(gemm, s, {.m = T, .n = Dh, .k = T}, dprobs, sq, k, mat, dheads, mat);
  gemm_per_head(gemm, s, {.m = T, .n = Dh, .k = T, .trans_a = true}, dprobs, sq, q, mat,
                dheads + part, mat);
  from_heads(s, 3, dheads, dqkv);
}

}  // namespace

void attention_forward_cpu(const AttentionShape& s, const float* qkv, float* out, float* heads,
                           float* probs, float* workspace) {
  check_attention_shape(s, "attention_forward_cpu");
  forward(gemm_cpu, s, qkv, out, heads, probs, workspace);
}

void attention_backward_cpu(const AttentionShape& s, const float* dout, const float* heads,
                            const float* probs, float* dqkv, float* workspace) {
  check_attention_shape(s, "attention_backward_cpu");
  backward(gemm_cpu, s, dout, heads, probs, dqkv, workspace);
}

void attention_forward_onednn(const AttentionShape& s, const float* qkv, float* out, float* heads,
                              float* probs, float* workspace) {
  check_attention_shape(s, "attention_forward_onednn");
  forward(gemm_onednn, s, qkv, out, heads, probs, workspace);
}

void attention_backward_onednn(const AttentionShape& s, const float* dout, const float* heads,
                               const float* probs, float* dqkv, float* workspace) {
  check_attention_shape(s, "attention_backward_onednn");
  backward(gemm_onednn, s, dout, heads, probs, dqkv, workspace);
}

}  // namespace lockstep::kernels
