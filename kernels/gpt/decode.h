// One position of a GPT against its key/value cache, on the GPU: the pieces of a single-row step
// that the layers' kernels (dense, layer norm, GELU, residual) do not cover. Used by
// runtime/model/gpt_decoder.h's device path, whose CPU path computes the same in plain loops.
//
// The position and the token are read from device memory, at[0] and at[1] (the caller writes them
// before each step), so that one recorded step serves every position: the decoder replays its step
// as a CUDA graph.
//
//   decode_embedding_cuda: x[dim] = wte[token, :] + wpe[position, :]
//   decode_store_kv_cuda: keys[position, :] = qkv[dim, 2 dim), values[position, :] = qkv[2 dim, 3
//   dim) decode_attention_cuda: for each of `heads` heads of head_dim = dim / heads values, the
//   query
//     q[h * head_dim ...] against the first position + 1 rows of keys and values (row stride dim):
//     scores q.k scaled by 1 / sqrt(head_dim), softmax in fp32 (the maximum subtracted),
//     out[h * head_dim ...] = the probabilities times the values. position < max_length, given at
//     the call, which sizes the launch (the scores of one head live in shared memory: max_length
//     floats): the same launch, and so the same sums, at every position.
//
// Device pointers, enqueued on `stream`, not waited for; std::invalid_argument for a shape out of
// range (dim not a multiple of heads, max_length < 1, a context over 12,160 positions); positions
// and tokens are the caller's to keep in range. Deterministic: each head's sums run in a fixed
// order. Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

// The longest context decode_attention_cuda takes: a head's scores in 47.5 KiB of dynamic shared
// memory, under the default 48 KiB with room for the block reductions' static arrays.
constexpr int kDecodeMaxContext = 12160;

void decode_embedding_cuda(const int* at, const float* wte, const float* wpe, float* x, int dim,
                           cudaStream_t stream);
void decode_store_kv_cuda(const int* at, const float* qkv, float* keys, float* values, int dim,
                          cudaStream_t stream);
void decode_attention_cuda(const float* q, const float* keys, const float* values, const int* at,
                           int max_length, int dim, int heads, float* out, cudaStream_t stream);

}  // namespace lockstep::kernels
