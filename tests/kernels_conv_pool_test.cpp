// The fused first-layer convolution + max-pool (+ ReLU) against the unfused OpenBLAS kernels, its
// oracle: conv2d_*_cpu, maxpool_*_cpu and relu_*_cpu in sequence. Inputs and weights are small
// integers and halves, so every convolution output is exact in float whatever the order of its
// sums: the maxima, their ties and the ReLU's cuts are the oracle's exactly. Odd sizes (floor
// mode), a 5x5 kernel, a 3x3 pool, batch 1, NHWC and blocked outputs. The ctest entries
// kernels_conv_pool_baseline_test and kernels_conv_pool_avx2_test run the same with the baseline
// and the AVX2 builds of the loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel_reference.h"
#include "kernels/activation.h"
#include "kernels/conv/conv_pool.h"
#include "kernels/conv/pool.h"
#include "kernels/onednn/onednn.h"

namespace lockstep::kernels {
namespace {

using kernel_test::max_rel_error;
using kernel_test::to_blocked16;

std::vector<float> small_values(size_t n, uint32_t seed, int lo, int hi, float scale) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(level(rng)) * scale;
  return v;
}

struct Case {
  const char* name;
  int n, h, w, c_out, kernel, k;
  bool relu, blocked;
};

const Case kCases[] = {
    {"cnn_first_layer_blocked_relu", 5, 28, 28, 32, 3, 2, true, true},
    {"nhwc_no_relu", 3, 28, 28, 32, 3, 2, false, false},
    {"odd_sizes_floor_mode", 2, 7, 9, 16, 3, 2, true, true},
    {"kernel5_pool3_nhwc", 2, 11, 10, 48, 5, 3, true, false},
    {"batch1", 1, 6, 6, 16, 3, 2, false, true},
};

class ConvPool : public ::testing::TestWithParam<Case> {};

TEST_P(ConvPool, MatchesConvThenPoolThenRelu) {
  const Case& c = GetParam();
  Conv2dShape conv{c.n, c.h, c.w, 1, c.c_out, c.kernel, c.kernel, 1, c.kernel / 2, c.kernel / 2};
  ASSERT_TRUE(conv_pool_supported(conv, c.k));
  const ConvPoolShape s{conv, c.k, c.relu, c.blocked};
  const PoolShape ps{c.n, c.h, c.w, c.c_out, c.k};
  const int oh = s.out_h(), ow = s.out_w();
  const size_t y_n = size_t(c.n) * c.h * c.w * c.c_out, p_n = size_t(c.n) * oh * ow * c.c_out;
  const auto x = small_values(size_t(c.n) * c.h * c.w, 1, -2, 2, 1.0f);
  const auto w = small_values(size_t(c.kernel) * c.kernel * c.c_out, 2, -2, 2, 0.5f);
  const auto b = small_values(c.c_out, 3, -2, 2, 0.5f);
  const auto dy = small_values(p_n, 4, -3, 3, 0.25f);
  const auto in_layout = [&](const std::vector<float>& v) {
    return c.blocked ? to_blocked16(v, c.n, oh, ow, c.c_out) : v;
  };

  // The oracle, forward and back.
  std::vector<float> ws(conv2d_workspace_floats(conv)), y(y_n), pooled(p_n), want(p_n), dp(p_n),
      dconv(y_n), dw_want(w.size(), 0.5f), db_want(c.c_out, 0.25f);
  std::vector<int32_t> arg(p_n);
  conv2d_forward_cpu(conv, x.data(), w.data(), b.data(), y.data(), ws.data());
  maxpool_forward_cpu(ps, y.data(), pooled.data(), arg.data());
  if (c.relu) {
    relu_forward_cpu(pooled.data(), want.data(), p_n);
    relu_backward_cpu(want.data(), dy.data(), dp.data(), p_n);
  } else {
    want = pooled;
    dp = dy;
  }
  maxpool_backward_cpu(ps, dp.data(), arg.data(), dconv.data());
  conv2d_backward_cpu(conv, x.data(), w.data(), dconv.data(), nullptr, dw_want.data(),
                      db_want.data(), ws.data());

  std::vector<float> got(p_n, 7.0f), dw(w.size(), 0.5f), db(c.c_out, 0.25f),
      scratch(conv_pool_scratch_floats(s));
  std::vector<int8_t> argmax(p_n);
  conv_pool_forward_cpu(s, x.data(), w.data(), b.data(), got.data(), argmax.data());
  EXPECT_EQ(got, in_layout(want));
  if (c.relu) {
    EXPECT_GT(std::count(want.begin(), want.end(), 0.0f), 0) << "no window was cut by the ReLU";
  }
  conv_pool_backward_cpu(s, x.data(), in_layout(dy).data(), argmax.data(), dw.data(), db.data(),
                         scratch.data());
  // Sums of products of halves and quarters: exact in either order.
  EXPECT_EQ(dw, dw_want);
  EXPECT_EQ(db, db_want);
  EXPECT_GT(max_rel_error(dw_want, std::vector<float>(w.size(), 0.5f)), 0.0) << "no gradient";
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvPool, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The weight gradient of random (inexact) data is the same bits at one thread and at two: one
// partial sum per image, added in image order.
TEST(ConvPoolThreads, WeightGradientIsTheSameBitsAtAnyThreadCount) {
  if (!onednn_built()) GTEST_SKIP() << "a build without oneDNN has no OpenMP threads to compare";
  const Conv2dShape conv{9, 28, 28, 1, 32, 3, 3, 1, 1, 1};
  const ConvPoolShape s{conv, 2, true, true};
  const auto x = kernel_test::random_floats(size_t(9) * 28 * 28, 1);
  const auto w = kernel_test::random_floats(9 * 32, 2), b = kernel_test::random_floats(32, 3);
  const auto dy = kernel_test::random_floats(size_t(9) * 14 * 14 * 32, 4);
  std::vector<float> y(dy.size()), scratch(conv_pool_scratch_floats(s));
  std::vector<int8_t> argmax(dy.size());
  std::vector<float> dw[2], db[2];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    conv_pool_forward_cpu(s, x.data(), w.data(), b.data(), y.data(), argmax.data());
    dw[threads - 1].assign(w.size(), 0.0f);
    db[threads - 1].assign(32, 0.0f);
    conv_pool_backward_cpu(s, x.data(), dy.data(), argmax.data(), dw[threads - 1].data(),
                           db[threads - 1].data(), scratch.data());
  }
  onednn_set_threads(1);
  EXPECT_EQ(dw[0], dw[1]);
  EXPECT_EQ(db[0], db[1]);
}

TEST(ConvPoolShapes, RefusesWhatItDoesNotFuse) {
  const Conv2dShape ok{2, 8, 8, 1, 16, 3, 3, 1, 1, 1};
  EXPECT_TRUE(conv_pool_supported(ok, 2));
  Conv2dShape two_channels = ok, stride2 = ok, c_out24 = ok, even = ok;
  two_channels.c_in = 2;
  stride2.stride = 2;
  c_out24.c_out = 24;
  even.kh = even.kw = 2;
  for (const Conv2dShape& bad : {two_channels, stride2, c_out24, even}) {
    EXPECT_FALSE(conv_pool_supported(bad, 2));
    float v = 0;
    int8_t a = 0;
    EXPECT_THROW(conv_pool_forward_cpu({bad, 2}, &v, &v, &v, &v, &a), std::invalid_argument);
  }
  EXPECT_FALSE(conv_pool_supported(ok, 9)) << "a window larger than the image";
}

}  // namespace
}  // namespace lockstep::kernels
