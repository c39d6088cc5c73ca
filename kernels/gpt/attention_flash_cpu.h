// Causal multi-head self-attention on the CPU without the T x T matrix: attention.h's contract
// (the packed qkv [batch, seq, 3C] in, out [batch, seq, C] the heads side by side, exact causal
// softmax, no dropout), computed flash-style in fp32. Per (batch entry, head, tile of 32 queries)
// the keys stream past in tiles of 32: scores of the tile, an online softmax (running maximum and
// sum per query row, the partial output rescaled as the maximum grows), tiles wholly above the
// diagonal skipped. Q, K and V are read in place from qkv by strides (no rearranged copies), and
// what the backward pass keeps is qkv itself, the output and one log-sum-exp per row: lse
// [batch, heads, seq] (attention_flash_cpu_lse_floats), B * H * T floats instead of
// attention.h's B * H * T * T probabilities.
//
// Backward: given qkv, out, dout and lse as the forward pass left them, overwrites dqkv
// [batch, seq, 3C]. Per (batch entry, head) the key tiles come in turn; for each, the query tiles
// at or below the diagonal recompute their probabilities from the log-sum-exp and add into dq and
// into the tile's dk and dv, which are then written once: no atomics, no T x T buffer.
//
// The products are our register-blocked loops in GCC vectors, built for AVX-512, AVX2 with FMA and
// the baseline (SSE2) and picked at run time (parallel.h: cpu_avx512f/cpu_avx2, capped by
// LOCKSTEP_CPU_ISA); exp is a degree-7 polynomial after range reduction (under 2 ulp for the
// arguments softmax gives it). Tiles spread over the rank's threads (OpenMP), each writing its own
// rows: a result is the same bits at any thread count, and the same bits from the same build of
// the kernel; the builds differ from each other (FMA, vector width) and from attention.h's
// materialised kernels by rounding only (the tests hold them within 2e-5 relative).
//
// attention_flash_cpu_supported(s): head_dim a multiple of 16 (every ISA's vectors divide it). No
// buffer may alias another. Stateless: threads may call them on separate buffers (each thread keeps
// a scratch of its own). No collective calls.
#pragma once

#include <cstddef>

#include "kernels/gpt/attention.h"

namespace lockstep::kernels {

bool attention_flash_cpu_supported(const AttentionShape& s);
size_t attention_flash_cpu_lse_floats(const AttentionShape& s);  // B * H * T

void attention_flash_forward_cpu(const AttentionShape& s, const float* qkv, float* out, float* lse);
void attention_flash_backward_cpu(const AttentionShape& s, const float* qkv, const float* out,
                                  const float* dout, const float* lse, float* dqkv);

}  // namespace lockstep::kernels
