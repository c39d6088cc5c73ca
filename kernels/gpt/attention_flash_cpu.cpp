#include "kernels/gpt/attention_flash_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/parallel.h"

// GCC reports the vector types of attention_flash_cpu_isa.inc passed between functions: they pass
// only between functions inlined into their target's entry points, no ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace lockstep::kernels {

namespace {

constexpr int kTile = 32;  // queries and keys per tile

// One build's entry points (attention_flash_cpu_isa.inc's kBuild).
struct Build {
  void (*forward_head)(const AttentionShape& s, const float* qkv, float* out, float* lse, int b,
                       int h);
  void (*backward_head)(const AttentionShape& s, const float* qkv, const float* out,
                        const float* dout, const float* lse, float* dqkv, int b, int h);
};

#define LS_ATT_NS avx512
#define LS_ATT_TARGET __attribute__((target("avx512f")))
#define LS_ATT_W 16
#define LS_ATT_ACC 16
#include "kernels/gpt/attention_flash_cpu_isa.inc"
#undef LS_ATT_NS
#undef LS_ATT_TARGET
#undef LS_ATT_W
#undef LS_ATT_ACC
#define LS_ATT_NS avx2
#define LS_ATT_TARGET __attribute__((target("avx2,fma")))
#define LS_ATT_W 8
#define LS_ATT_ACC 8
#include "kernels/gpt/attention_flash_cpu_isa.inc"
#undef LS_ATT_NS
#undef LS_ATT_TARGET
#undef LS_ATT_W
#undef LS_ATT_ACC
#define LS_ATT_NS baseline
#define LS_ATT_TARGET
#define LS_ATT_W 4
#define LS_ATT_ACC 8
#include "kernels/gpt/attention_flash_cpu_isa.inc"
#undef LS_ATT_NS
#undef LS_ATT_TARGET
#undef LS_ATT_W
#undef LS_ATT_ACC

const Build& build() {
  return cpu_avx512f() ? avx512::kBuild : cpu_avx2() ? avx2::kBuild : baseline::kBuild;
}

void check(const AttentionShape& s, const char* who) {
  check_attention_shape(s, who);
  if (!attention_flash_cpu_supported(s))
    throw std::invalid_argument(std::string(who) +
                                ": needs a head_dim that is a multiple of 16, not " +
                                std::to_string(s.head_dim));
}

// fn(b, h) for every head of every batch entry, spread over the rank's threads as they come free
// (a head's work writes its own rows and columns only).
template <class Fn>
void for_each_head(const AttentionShape& s, Fn&& fn) {
  const long heads = static_cast<long>(s.batch) * s.heads;
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
  for (long i = 0; i < heads; ++i) fn(static_cast<int>(i / s.heads), static_cast<int>(i % s.heads));
}

}  // namespace

bool attention_flash_cpu_supported(const AttentionShape& s) {
  return s.head_dim > 0 && s.head_dim % 16 == 0;
}

size_t attention_flash_cpu_lse_floats(const AttentionShape& s) {
  return static_cast<size_t>(s.batch) * s.heads * s.seq;
}

void attention_flash_forward_cpu(const AttentionShape& s, const float* qkv, float* out,
                                 float* lse) {
  check(s, "attention_flash_forward_cpu");
  const Build& k = build();
  for_each_head(s, [&](int b, int h) { k.forward_head(s, qkv, out, lse, b, h); });
}

void attention_flash_backward_cpu(const AttentionShape& s, const float* qkv, const float* out,
                                  const float* dout, const float* lse, float* dqkv) {
  check(s, "attention_flash_backward_cpu");
  const Build& k = build();
  for_each_head(s, [&](int b, int h) { k.backward_head(s, qkv, out, dout, lse, dqkv, b, h); });
}

}  // namespace lockstep::kernels
