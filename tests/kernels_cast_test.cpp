// float32 <-> bfloat16 casts on the CPU (the oracle of the CUDA twins): rounding to nearest even,
// infinities on overflow, NaNs kept, exact widening, and the same words as the communicator's
// conversion (runtime/base/dtype.h), so that bf16 buffers mean the same thing everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cast.h"
#include "runtime/base/dtype.h"

namespace lk = lockstep::kernels;

namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t narrow(float f) {
  uint16_t h;
  lk::cast_f32_to_bf16_cpu(&f, &h, 1);
  return h;
}

TEST(KernelsCast, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(narrow(1.0f), 0x3f80);
  EXPECT_EQ(narrow(from_bits(0x3f808000)), 0x3f80);  // halfway, even neighbour below
  EXPECT_EQ(narrow(from_bits(0x3f818000)), 0x3f82);  // halfway, even neighbour above
  EXPECT_EQ(narrow(from_bits(0x3f808001)), 0x3f81);  // just above halfway
  EXPECT_EQ(narrow(from_bits(0x3f807fff)), 0x3f80);  // just below halfway
  EXPECT_EQ(narrow(-0.0f), 0x8000);
  EXPECT_EQ(narrow(from_bits(0x00000001)), 0x0000);  // the smallest subnormal rounds to zero
}

TEST(KernelsCast, OverflowGivesInfinityAndNaNStaysNaN) {
  EXPECT_EQ(narrow(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(narrow(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(narrow(from_bits(0x7f7f7fff)), 0x7f7f);  // largest value that still rounds down
  EXPECT_EQ(narrow(std::numeric_limits<float>::infinity()), 0x7f80);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7f80ffffu}) {
    const uint16_t h = narrow(from_bits(nan));
    EXPECT_EQ(h & 0x7f80, 0x7f80) << std::hex << nan;
    EXPECT_NE(h & 0x007f, 0) << "still a NaN, not an infinity: " << std::hex << nan;
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << "sign kept";
  }
}

TEST(KernelsCast, WideningIsExactAndRoundTrips) {
  std::vector<uint16_t> every(65536);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(every.size());
  lk::cast_bf16_to_f32_cpu(every.data(), wide.data(), every.size());
  std::vector<uint16_t> back(every.size());
  lk::cast_f32_to_bf16_cpu(wide.data(), back.data(), wide.size());
  for (size_t i = 0; i < every.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wide[i], sizeof bits);
    ASSERT_EQ(bits, static_cast<uint32_t>(i) << 16) << "widening of " << i;
    if (!std::isnan(wide[i])) {
      ASSERT_EQ(back[i], every[i]) << "round trip of " << i;
    }
  }
}

TEST(KernelsCast, AgreesWithTheCommunicatorsConversionAndKeepsEightBits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-100, 100);
  std::vector<float> x(100000);
  for (float& v : x) v = std::ldexp(mantissa(rng), exponent(rng));
  std::vector<uint16_t> h(x.size());
  lk::cast_f32_to_bf16_cpu(x.data(), h.data(), x.size());
  std::vector<float> back(x.size());
  lk::cast_bf16_to_f32_cpu(h.data(), back.data(), h.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], lockstep::float_to_bf16(x[i])) << x[i];
    ASSERT_LE(std::fabs(back[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << x[i];
  }
}

}  // namespace
