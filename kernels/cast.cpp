#include "kernels/cast.h"

#include <cstring>

namespace lockstep::kernels {

namespace {

// Bit-level rounding, written out so that cast.cu can do exactly the same on the GPU: add half an
// ulp of bf16 (0x7fff) plus the lowest kept bit (ties go to even), then truncate. Overflow carries
// into the exponent and yields infinity, as round-to-nearest must.
inline uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace

void cast_f32_to_bf16_cpu(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

void cast_bf16_to_f32_cpu(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

}  // namespace lockstep::kernels
