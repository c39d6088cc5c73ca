// ReLU CPU kernels: forward, backward from the forward output, in place, special values (NaN,
// infinities, signed zero, subnormals), and a gradient check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_reference.h"
#include "kernels/activation.h"

namespace lockstep::kernels {
namespace {

using kernel_test::random_floats;

TEST(Relu, ForwardClampsNegativesOutOfPlaceAndInPlace) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}}) {
    const auto x = random_floats(n, 1);
    std::vector<float> y(n, 9.0f);
    relu_forward_cpu(x.data(), y.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f) << i;
    std::vector<float> z = x;
    relu_forward_cpu(z.data(), z.data(), n);
    EXPECT_EQ(z, y);
  }
}

// The special values the GPU parity test also feeds the CUDA twin (kernels_parity_gpu_test).
TEST(Relu, SpecialValuesNaNInfinitiesAndSignedZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {std::nanf(""),
                                -std::nanf(""),
                                inf,
                                -inf,
                                0.0f,
                                -0.0f,
                                std::numeric_limits<float>::denorm_min(),
                                -1.0f,
                                2.0f};
  std::vector<float> y(x.size());
  relu_forward_cpu(x.data(), y.data(), x.size());
  EXPECT_TRUE(std::isnan(y[0])) << "NaN must pass on: the NaN guard looks for it";
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], inf);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_FALSE(std::signbit(y[3])) << "a negative input becomes +0";
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_FALSE(std::signbit(y[4]));
  EXPECT_TRUE(std::signbit(y[5])) << "-0 is not negative: it passes on as -0";
  EXPECT_EQ(y[6], std::numeric_limits<float>::denorm_min()) << "subnormals are not flushed";
  EXPECT_EQ(y[7], 0.0f);
  EXPECT_EQ(y[8], 2.0f);
  // Backward: the gradient passes only where the output is positive (not NaN, not a zero).
  const std::vector<float> dy(x.size(), 3.0f);
  std::vector<float> dx(x.size());
  relu_backward_cpu(y.data(), dy.data(), dx.data(), x.size());
  const std::vector<float> want = {0, 0, 3, 0, 0, 0, 3, 0, 3};
  EXPECT_EQ(dx, want);
}

TEST(Relu, BackwardPassesGradientWhereOutputIsPositive) {
  const size_t n = 1001;
  const auto x = random_floats(n, 2), dy = random_floats(n, 3);
  std::vector<float> y(n), dx(n, 9.0f);
  relu_forward_cpu(x.data(), y.data(), n);
  relu_backward_cpu(y.data(), dy.data(), dx.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0f) << i;
  // dx may alias dy.
  std::vector<float> g = dy;
  relu_backward_cpu(y.data(), g.data(), g.data(), n);
  EXPECT_EQ(g, dx);
}

TEST(Relu, BackwardMatchesFiniteDifferences) {
  const size_t n = 200;
  // Keep inputs at least 0.05 away from the kink so a step of 1e-2 never crosses it.
  auto x = random_floats(n, 4, 0.05f, 1.0f);
  for (size_t i = 0; i < n; i += 2) x[i] = -x[i];
  const auto r = kernel_test::to_double(random_floats(n, 5));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> y(n), dx(n);
  relu_forward_cpu(x.data(), y.data(), n);
  relu_backward_cpu(y.data(), rf.data(), dx.data(), n);
  auto objective = [&] {
    relu_forward_cpu(x.data(), y.data(), n);
    return kernel_test::dot(r, y.data(), n);
  };
  kernel_test::expect_gradient(x, dx, objective, {.samples = n}, "dx");
}

}  // namespace
}  // namespace lockstep::kernels
