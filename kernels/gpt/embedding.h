// Token plus position embedding, GPT-2's input layer, on row-major float32:
//   out[b, t, :] = wte[tok[b, t], :] + wpe[t, :]
// with tokens int32 [batch, seq], wte [vocab, dim], wpe [max_seq, dim] (seq <= max_seq) and
// out [batch, seq, dim] overwritten. Backward scatter-adds: dwte[tok[b, t], :] += dout[b, t, :] and
// dwpe[t, :] += dout[b, t, :] (accumulated, as dense.h; either may be null). A token outside
// [0, vocab) throws std::out_of_range on the CPU, naming it and its position; the GPU cannot throw
// and gives its row no token embedding (out = wpe only) and no dwte term; callers validate tokens
// when they load them (lockstep-data text writes bytes, always below 256).
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

struct EmbeddingShape {
  int batch = 0, seq = 0, vocab = 0, max_seq = 0, dim = 0;
};

// Throws std::invalid_argument naming `who` unless batch >= 0, 0 < seq <= max_seq and vocab, dim
// > 0 (both twins call it).
void check_embedding_shape(const EmbeddingShape& s, const char* who);

// Token ids carried as floats (the model's input buffer holds them so: whole numbers, exact in
// fp32) into int32 tokens[n]. The CPU form throws std::out_of_range naming the value and its index
// when one is not a whole number in [0, vocab); the CUDA form writes -1 for such a value (the
// embedding then gives that position no token embedding, as above).
void tokens_from_floats_cpu(const float* x, int32_t* tokens, size_t n, int vocab);
void tokens_from_floats_cuda(const float* x, int32_t* tokens, size_t n, int vocab,
                             cudaStream_t stream);

void embedding_forward_cpu(const EmbeddingShape& s, const int32_t* tokens, const float* wte,
                           const float* wpe, float* out);
void embedding_backward_cpu(const EmbeddingShape& s, const int32_t* tokens, const float* dout,
                            float* dwte, float* dwpe);

// CUDA twins (embedding.cu): device pointers, same contract, enqueued on `stream`. The scatter-add
// has no atomics: each vocabulary row sums its positions in order (b, t) from zero and adds that
// sum to dwte once, each position row its batch entries in order b, so identical inputs give
// identical bits. The dwte pass groups the positions by token first (CUB's stable radix sort of
// the (token, position) pairs), so its work grows with positions x dim, not with the vocabulary
// (GPT-2's 50,304 as cheaply as bytes' 256); its scratch is allocated in stream order.
void embedding_forward_cuda(const EmbeddingShape& s, const int32_t* tokens, const float* wte,
                            const float* wpe, float* out, cudaStream_t stream);
void embedding_backward_cuda(const EmbeddingShape& s, const int32_t* tokens, const float* dout,
                             float* dwte, float* dwpe, cudaStream_t stream);

}  // namespace lockstep::kernels
