// Causal self-attention without the T x T matrix (bf16 runs on a GPU): the same function as
// attention.h's, computed flash-style on the tensor cores, for the CUDA twin only.
//
// The layout is attention.h's: qkv [batch, seq, 3C] packed q | k | v, head h in columns
// [h * head_dim, (h + 1) * head_dim) of each; out [batch, seq, C]. The forward pass rounds qkv to
// bf16 head by head into `heads` (attention_flash_heads_floats(s) floats holding
// [3][batch * heads][seq][head_dim] bf16 words), the only copy of Q, K and V the backward pass
// reads; each block of 64 query rows then streams the key/value tiles up to its diagonal (the tiles
// above it are skipped), keeps a running maximum and sum per row in fp32 (online softmax) and never
// stores the probabilities. The products run on bf16 operands (Q, K, V, the probabilities and the
// output gradient rounded to bf16) with fp32 accumulation: within bf16 rounding of the exact fp32
// function, not equal to it (the fp32 precision keeps attention.h's exact path).
//
// The forward pass also writes lse [batch * heads * seq], each query row's log-sum-exp of its
// scaled scores; the backward pass recomputes the probabilities from heads and lse, first per key
// tile (the key and value gradients) then per query tile (the query gradient), so every element of
// dqkv is written once by one thread block: no atomics, the same bits run after run. `workspace`
// holds attention_flash_workspace_floats(s) floats (each row's dout . out, and dout in bf16 by
// head). No buffer may alias another; qkv, out, heads, dout and workspace start on 16-byte
// boundaries. Stateless functions, enqueued on `stream`: threads may call them on separate buffers.
// No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"
#include "kernels/gpt/attention.h"

namespace lockstep::kernels {

// Whether the flash kernels take this shape: head_dim 16, 32, 64 or 128 (their tile widths).
bool attention_flash_supported(const AttentionShape& s);

size_t attention_flash_heads_floats(const AttentionShape& s);  // 3 * B * T * C bf16 words
size_t attention_flash_lse_floats(const AttentionShape& s);    // B * H * T
size_t attention_flash_workspace_floats(
    const AttentionShape& s);  // about B * H * T + B * T * C / 2

// Throw std::invalid_argument for a shape attention_flash_supported refuses.
void attention_flash_forward_cuda(const AttentionShape& s, const float* qkv, float* out,
                                  uint16_t* heads, float* lse, cudaStream_t stream);
// The forward pass's first step alone: qkv rounded to bf16 into heads (attention_cudnn.h's inputs
// too).
void attention_flash_heads_cuda(const AttentionShape& s, const float* qkv, uint16_t* heads,
                                cudaStream_t stream);
// Overwrites dqkv [batch, seq, 3C] from dout [batch, seq, C] and the forward pass's heads, out,
// lse.
void attention_flash_backward_cuda(const AttentionShape& s, const uint16_t* heads, const float* out,
                                   const float* lse, const float* dout, float* dqkv,
                                   float* workspace, cudaStream_t stream);

}  // namespace lockstep::kernels
