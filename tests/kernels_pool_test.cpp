// Max-pool CPU kernels: forward values and argmax against a direct loop, floor mode, tie order,
// and the backward scatter against the reference and finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <ostream>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/activation.h"
#include "kernels/conv/pool.h"

namespace lockstep::kernels {
namespace {

size_t in_size(const PoolShape& s) { return size_t(s.n) * s.h * s.w * s.c; }
size_t out_size(const PoolShape& s) { return size_t(s.n) * s.out_h() * s.out_w() * s.c; }

// Distinct values (a shuffled ramp with steps of 0.01), so every window has one clear maximum.
std::vector<float> distinct_values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i) - 0.005f * n;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

// Flat input index of the first maximum of each window (reference).
std::vector<int32_t> reference_argmax(const PoolShape& s, const std::vector<float>& x) {
  std::vector<int32_t> arg(out_size(s));
  size_t o = 0;
  for (int n = 0; n < s.n; ++n)
    for (int oy = 0; oy < s.out_h(); ++oy)
      for (int ox = 0; ox < s.out_w(); ++ox)
        for (int c = 0; c < s.c; ++c, ++o) {
          int32_t best = -1;
          for (int ky = 0; ky < s.k; ++ky)
            for (int kx = 0; kx < s.k; ++kx) {
              const int32_t i = ((n * s.h + oy * s.k + ky) * s.w + ox * s.k + kx) * s.c + c;
              if (best < 0 || x[i] > x[best]) best = i;
            }
          arg[o] = best;
        }
  return arg;
}

struct Case {
  const char* name;
  PoolShape s;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"cnn_pool1", {2, 28, 28, 32, 2}}, {"odd_floor", {3, 7, 5, 3, 2}},
    {"k3_c1", {2, 9, 10, 1, 3}},       {"k1_identity", {1, 3, 4, 5, 1}},
    {"whole_image", {2, 4, 4, 3, 4}},
};

class PoolCase : public ::testing::TestWithParam<Case> {};

TEST_P(PoolCase, ForwardPicksWindowMaximum) {
  const PoolShape s = GetParam().s;
  const auto x = distinct_values(in_size(s), 1);
  std::vector<float> y(out_size(s));
  std::vector<int32_t> arg(out_size(s), -7);
  maxpool_forward_cpu(s, x.data(), y.data(), arg.data());
  EXPECT_EQ(arg, reference_argmax(s, x));
  for (size_t o = 0; o < y.size(); ++o) ASSERT_EQ(y[o], x[arg[o]]) << o;
}

TEST_P(PoolCase, BackwardScattersToArgmaxAndMatchesFiniteDifferences) {
  const PoolShape s = GetParam().s;
  auto x = distinct_values(in_size(s), 2);
  const auto r = kernel_test::to_double(kernel_test::random_floats(out_size(s), 3));
  const std::vector<float> dy(r.begin(), r.end());
  std::vector<float> y(out_size(s)), dx(in_size(s), std::nanf(""));
  std::vector<int32_t> arg(out_size(s));
  maxpool_forward_cpu(s, x.data(), y.data(), arg.data());
  maxpool_backward_cpu(s, dy.data(), arg.data(), dx.data());
  std::vector<float> expect(in_size(s), 0.0f);
  const auto ref_arg = reference_argmax(s, x);
  for (size_t o = 0; o < dy.size(); ++o) expect[ref_arg[o]] += dy[o];
  EXPECT_EQ(dx, expect);  // also: rows/columns dropped by floor mode get exactly 0

  // Values are 0.01 apart, so a step of 0.002 never changes which element is the maximum.
  auto objective = [&] {
    maxpool_forward_cpu(s, x.data(), y.data(), arg.data());
    return kernel_test::dot(r, y.data(), y.size());
  };
  kernel_test::expect_gradient(x, dx, objective, {.step = 2e-3, .samples = 64}, "dx");
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolCase, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(MaxPool, TieGoesToFirstElementOfWindow) {
  const PoolShape s{1, 2, 2, 2, 2};
  // Channel 0: all equal; channel 1: maximum shared by the 2nd and 4th tap.
  const std::vector<float> x = {1, 0, 1, 5, 1, 2, 1, 5};
  std::vector<float> y(2);
  std::vector<int32_t> arg(2);
  maxpool_forward_cpu(s, x.data(), y.data(), arg.data());
  EXPECT_EQ(arg, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(y, (std::vector<float>{1, 5}));
}

std::vector<float> to_blocked16(const std::vector<float>& x, const PoolShape& s) {
  return kernel_test::to_blocked16(x, s.n, s.h, s.w, s.c);
}

// The blocked pair gives the NHWC pair's maxima and gradients exactly, ties included (few
// distinct values), with the gradient in the blocked layout, and with the output (and dy) blocked
// too; channels not a multiple of 16 are refused. Each kernel's fused ReLU gives the pool then
// the ReLU.
TEST(MaxPool, Blocked16MatchesNhwcExactly) {
  const PoolShape shapes[] = {{3, 28, 28, 32, 2}, {2, 7, 9, 16, 3}, {1, 4, 4, 48, 2}};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 3);
  for (const PoolShape& s : shapes) {
    SCOPED_TRACE(testing::Message()
                 << s.n << "x" << s.h << "x" << s.w << "x" << s.c << " k=" << s.k);
    const size_t in_n = size_t(s.n) * s.h * s.w * s.c;
    const size_t out_n = size_t(s.n) * s.out_h() * s.out_w() * s.c;
    std::vector<float> x(in_n), dy(out_n);
    for (float& v : x) v = static_cast<float>(level(rng));
    for (float& v : dy) v = static_cast<float>(level(rng)) - 1.5f;
    std::vector<float> y(out_n), yb(out_n), dx(in_n), dxb(in_n, 9.0f);
    std::vector<int32_t> arg(out_n), argb(out_n);
    maxpool_forward_cpu(s, x.data(), y.data(), arg.data());
    maxpool_backward_cpu(s, dy.data(), arg.data(), dx.data());
    maxpool_forward_blocked16_cpu(s, to_blocked16(x, s).data(), yb.data(), argb.data());
    maxpool_backward_blocked16_cpu(s, dy.data(), argb.data(), dxb.data());
    EXPECT_EQ(yb, y);
    EXPECT_EQ(dxb, to_blocked16(dx, s));
    // Blocked in and out: y and dy in the output's blocks.
    const PoolShape out_shape{s.n, s.out_h(), s.out_w(), s.c, 1};
    std::vector<float> ybb(out_n), dxbb(in_n, 9.0f);
    maxpool_forward_blocked16_cpu(s, to_blocked16(x, s).data(), ybb.data(), argb.data(), true);
    maxpool_backward_blocked16_cpu(s, to_blocked16(dy, out_shape).data(), argb.data(), dxbb.data(),
                                   true);
    EXPECT_EQ(ybb, to_blocked16(y, out_shape));
    EXPECT_EQ(dxbb, to_blocked16(dx, s));
    // A ReLU fused into the blocked pool: the pool then the ReLU, forward and back, on inputs
    // shifted so that some windows are all negative (and some maxima exactly 0).
    std::vector<float> xs(x), ys(out_n), r(out_n), dr(out_n), dxs(in_n), yf(out_n), dxf(in_n, 9.0f);
    for (float& v : xs) v -= 2.0f;
    maxpool_forward_cpu(s, xs.data(), ys.data(), arg.data());
    relu_forward_cpu(ys.data(), r.data(), out_n);
    relu_backward_cpu(r.data(), dy.data(), dr.data(), out_n);
    maxpool_backward_cpu(s, dr.data(), arg.data(), dxs.data());
    maxpool_forward_blocked16_cpu(s, to_blocked16(xs, s).data(), yf.data(), argb.data(), false,
                                  true);
    maxpool_backward_blocked16_cpu(s, dy.data(), argb.data(), dxf.data());
    EXPECT_EQ(yf, r);
    EXPECT_EQ(dxf, to_blocked16(dxs, s));
    EXPECT_TRUE(std::count(r.begin(), r.end(), 0.0f) > 0) << "no window was cut by the ReLU";
    // The same ReLU fused into the NHWC pool: -1 where it cut, skipped backward.
    std::vector<float> yn(out_n), dxn(in_n, 9.0f);
    std::vector<int32_t> argn(out_n);
    maxpool_forward_cpu(s, xs.data(), yn.data(), argn.data(), true);
    maxpool_backward_cpu(s, dy.data(), argn.data(), dxn.data());
    EXPECT_EQ(yn, r);
    EXPECT_EQ(dxn, dxs);
    EXPECT_EQ(std::count(argn.begin(), argn.end(), -1), std::count(r.begin(), r.end(), 0.0f));
  }
  EXPECT_THROW(maxpool_forward_blocked16_cpu({1, 4, 4, 8, 2}, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

TEST(MaxPool, RejectsBadShapes) {
  EXPECT_THROW(maxpool_forward_cpu({1, 2, 2, 1, 3}, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(maxpool_forward_cpu({1, 4, 4, 1, 0}, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(maxpool_backward_cpu({1, 4, 4, 0, 2}, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::kernels
