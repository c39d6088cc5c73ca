// Causal multi-head self-attention, the core of a GPT-2 block between its two dense layers, exact
// (no approximation, no dropout), fp32 row-major.
//
// Layout. The input is the packed output of the block's qkv projection (one dense layer C -> 3C),
// qkv [batch, seq, 3C] with C = heads * head_dim: columns [0, C) are q, [C, 2C) k, [2C, 3C) v, and
// within each, head h owns columns [h * head_dim, (h + 1) * head_dim), as GPT-2 and llm.c split
// them (PyTorch: q, k, v = qkv.split(C, -1); q.view(B, T, H, Dh).transpose(1, 2)). The output is
// out [batch, seq, C], the heads side by side, ready for the output projection.
//
// Forward, per batch entry b and head h, with q, k, v the head's [seq, head_dim] matrices:
//   att = softmax(q k^T / sqrt(head_dim) + mask),  mask[t, s] = -inf for s > t, else 0
//   out_h = att v
// `heads` (3 * batch * heads * seq * head_dim floats: q, k, v rearranged to [3, B, H, T, Dh], each
// head's matrix contiguous) and `probs` (batch * heads * seq * seq: att, exactly 0 above the
// diagonal) are written by the forward pass and read by the backward pass of the same batch. The
// products are batched GEMMs over the B * H heads (gemm_cpu per head; cuBLAS strided-batched on
// the GPU) and the softmax is a masked row kernel.
//
// Backward: given dout [batch, seq, C], overwrites dqkv [batch, seq, 3C] (attention has no
// parameters; nothing accumulates). `workspace` is scratch of attention_workspace_floats(s) floats
// for either pass, owned by the caller so steps do not allocate. No buffer may alias another.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  int channels() const { return heads * head_dim; }
};

// Throws std::invalid_argument naming `who` unless batch >= 0 and seq, heads, head_dim > 0 (every
// twin calls it).
void check_attention_shape(const AttentionShape& s, const char* who);

size_t attention_heads_floats(const AttentionShape& s);      // 3 * B * T * C
size_t attention_probs_floats(const AttentionShape& s);      // B * H * T * T
size_t attention_workspace_floats(const AttentionShape& s);  // 4 * B * T * C + B * H * T * T

void attention_forward_cpu(const AttentionShape& s, const float* qkv, float* out, float* heads,
                           float* probs, float* workspace);
void attention_backward_cpu(const AttentionShape& s, const float* dout, const float* heads,
                            const float* probs, float* dqkv, float* workspace);

// The same with the per-head products through oneDNN (gemm_onednn; onednn.h): the CPU layers'
// choice where the build has it (OpenBLAS's sgemm on these small matrices is the slower one).
void attention_forward_onednn(const AttentionShape& s, const float* qkv, float* out, float* heads,
                              float* probs, float* workspace);
void attention_backward_onednn(const AttentionShape& s, const float* dout, const float* heads,
                               const float* probs, float* dqkv, float* workspace);
// CUDA twins (attention.cu): device pointers, same contract, enqueued on `stream`. Softmax rows
// reduce in a fixed order: identical inputs give identical bits.
void attention_forward_cuda(const AttentionShape& s, const float* qkv, float* out, float* heads,
                            float* probs, float* workspace, cudaStream_t stream);
void attention_backward_cuda(const AttentionShape& s, const float* dout, const float* heads,
                             const float* probs, float* dqkv, float* workspace,
                             cudaStream_t stream);

}  // namespace lockstep::kernels
