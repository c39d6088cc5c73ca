// conv2d CPU kernel (im2col + gemm) against a direct double-precision convolution, and its
// backward pass against that reference and against finite differences of the forward kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/conv/conv2d.h"

namespace lockstep::kernels {
namespace {

using kernel_test::GradCheck;
using kernel_test::max_rel_error;
using kernel_test::random_floats;

size_t x_size(const Conv2dShape& s) { return static_cast<size_t>(s.n) * s.h * s.w * s.c_in; }
size_t w_size(const Conv2dShape& s) { return static_cast<size_t>(s.kh) * s.kw * s.c_in * s.c_out; }
size_t y_size(const Conv2dShape& s) {
  return static_cast<size_t>(s.n) * s.out_h() * s.out_w() * s.c_out;
}

// Visits every (output element, weight tap, input element) triple of the convolution that does
// not fall into the zero padding: fn(y_index, w_index, x_index).
template <class Fn>
void for_each_tap(const Conv2dShape& s, Fn fn) {
  for (int n = 0; n < s.n; ++n)
    for (int oy = 0; oy < s.out_h(); ++oy)
      for (int ox = 0; ox < s.out_w(); ++ox)
        for (int ky = 0; ky < s.kh; ++ky)
          for (int kx = 0; kx < s.kw; ++kx) {
            const int iy = oy * s.stride - s.pad_h + ky, ix = ox * s.stride - s.pad_w + kx;
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            for (int ci = 0; ci < s.c_in; ++ci)
              for (int co = 0; co < s.c_out; ++co)
                fn(((static_cast<size_t>(n) * s.out_h() + oy) * s.out_w() + ox) * s.c_out + co,
                   ((static_cast<size_t>(ky) * s.kw + kx) * s.c_in + ci) * s.c_out + co,
                   ((static_cast<size_t>(n) * s.h + iy) * s.w + ix) * s.c_in + ci);
          }
}

std::vector<double> reference_forward(const Conv2dShape& s, const std::vector<float>& x,
                                      const std::vector<float>& w, const std::vector<float>* b) {
  std::vector<double> y(y_size(s), 0.0);
  if (b != nullptr)
    for (size_t i = 0; i < y.size(); ++i) y[i] = (*b)[i % s.c_out];
  for_each_tap(
      s, [&](size_t yi, size_t wi, size_t xi) { y[yi] += static_cast<double>(w[wi]) * x[xi]; });
  return y;
}

struct Case {
  const char* name;
  Conv2dShape s;
};

// n, h, w, c_in, c_out, kh, kw, stride, pad_h, pad_w
const Case kCases[] = {
    {"same3x3_cin1", {2, 5, 5, 1, 4, 3, 3, 1, 1, 1}},
    {"same3x3_cin3_nonsquare", {2, 6, 9, 3, 5, 3, 3, 1, 1, 1}},
    {"valid_pad0_odd", {3, 7, 5, 2, 3, 3, 3, 1, 0, 0}},
    {"stride2_pad1", {2, 9, 7, 3, 4, 3, 3, 2, 1, 1}},
    {"stride2_pad2_5x5", {2, 11, 8, 3, 2, 5, 5, 2, 2, 2}},
    {"nonsquare_kernel_mixed_pad", {1, 8, 10, 2, 3, 2, 3, 1, 0, 2}},
    {"stride3_odd", {2, 10, 11, 1, 2, 3, 2, 3, 1, 0}},
    {"pointwise_pad2", {2, 3, 4, 3, 2, 1, 1, 1, 2, 2}},
    {"pad_wider_than_kernel", {2, 4, 5, 2, 3, 1, 2, 2, 0, 3}},
    {"kernel_covers_input", {2, 3, 3, 2, 3, 3, 3, 1, 0, 0}},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Conv2dCase : public ::testing::TestWithParam<Case> {};

TEST_P(Conv2dCase, ForwardMatchesDirectConvolution) {
  const Conv2dShape s = GetParam().s;
  const auto x = random_floats(x_size(s), 1), w = random_floats(w_size(s), 2);
  const auto b = random_floats(s.c_out, 3);
  std::vector<float> ws(conv2d_workspace_floats(s)), y(y_size(s), 7.0f);
  conv2d_forward_cpu(s, x.data(), w.data(), b.data(), y.data(), ws.data());
  EXPECT_LT(max_rel_error(y, reference_forward(s, x, w, &b)), 1e-5);
  // Without a bias the output is overwritten, not added to.
  conv2d_forward_cpu(s, x.data(), w.data(), nullptr, y.data(), ws.data());
  EXPECT_LT(max_rel_error(y, reference_forward(s, x, w, nullptr)), 1e-5);
}

TEST_P(Conv2dCase, BackwardMatchesReferenceAndAccumulates) {
  const Conv2dShape s = GetParam().s;
  const auto x = random_floats(x_size(s), 4), w = random_floats(w_size(s), 5);
  const auto dy = random_floats(y_size(s), 6);
  // dw and db start from earlier contents (accumulate); dx starts as NaN (must be overwritten).
  const auto dw0 = random_floats(w.size(), 7), db0 = random_floats(s.c_out, 8);
  std::vector<double> dx_ref(x.size(), 0.0), dw_ref(dw0.begin(), dw0.end()),
      db_ref(db0.begin(), db0.end());
  for_each_tap(s, [&](size_t yi, size_t wi, size_t xi) {
    dx_ref[xi] += static_cast<double>(dy[yi]) * w[wi];
    dw_ref[wi] += static_cast<double>(dy[yi]) * x[xi];
  });
  for (size_t i = 0; i < dy.size(); ++i) db_ref[i % s.c_out] += dy[i];

  std::vector<float> ws(conv2d_workspace_floats(s)), dx(x.size(), std::nanf(""));
  std::vector<float> dw = dw0, db = db0;
  conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), ws.data());
  EXPECT_LT(max_rel_error(dx, dx_ref), 1e-5);
  EXPECT_LT(max_rel_error(dw, dw_ref), 1e-5);
  EXPECT_LT(max_rel_error(db, db_ref), 1e-5);

  // dx == null skips the input gradient only.
  dw = dw0;
  db = db0;
  conv2d_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw.data(), db.data(), ws.data());
  EXPECT_LT(max_rel_error(dw, dw_ref), 1e-5);
  EXPECT_LT(max_rel_error(db, db_ref), 1e-5);
}

// Gradients of L = sum(r * conv(x, w, b)) from the backward kernel against central differences of
// the forward kernel.
TEST_P(Conv2dCase, BackwardMatchesFiniteDifferences) {
  const Conv2dShape s = GetParam().s;
  auto x = random_floats(x_size(s), 9), w = random_floats(w_size(s), 10);
  auto b = random_floats(s.c_out, 11);
  const auto r = kernel_test::to_double(random_floats(y_size(s), 12));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> ws(conv2d_workspace_floats(s)), y(y_size(s));
  auto objective = [&] {
    conv2d_forward_cpu(s, x.data(), w.data(), b.data(), y.data(), ws.data());
    return kernel_test::dot(r, y.data(), y.size());
  };
  std::vector<float> dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  conv2d_backward_cpu(s, x.data(), w.data(), rf.data(), dx.data(), dw.data(), db.data(), ws.data());
  const GradCheck check;
  kernel_test::expect_gradient(x, dx, objective, check, "dx");
  kernel_test::expect_gradient(w, dw, objective, check, "dw");
  kernel_test::expect_gradient(b, db, objective, check, "db");
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2dCase, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Conv2d, BatchRowsAreIndependent) {
  // The batch is one gemm: each image's output must be the output of that image alone. Not bit for
  // bit: OpenBLAS picks its kernel by the matrix's size (on AVX-512 a small-matrix path for one
  // image), so the sums may round differently; an image mixed with another would be off by O(1).
  const Conv2dShape s{4, 6, 5, 3, 4, 3, 3, 2, 1, 1};
  Conv2dShape one = s;
  one.n = 1;
  const auto x = random_floats(x_size(s), 13), w = random_floats(w_size(s), 14);
  std::vector<float> ws(conv2d_workspace_floats(s)), y(y_size(s)), y1(y_size(one));
  conv2d_forward_cpu(s, x.data(), w.data(), nullptr, y.data(), ws.data());
  for (int n = 0; n < s.n; ++n) {
    conv2d_forward_cpu(one, x.data() + n * x_size(one), w.data(), nullptr, y1.data(), ws.data());
    for (size_t i = 0; i < y1.size(); ++i)
      ASSERT_NEAR(y[n * y1.size() + i], y1[i], 1e-6 * (1 + std::fabs(y1[i]))) << "image " << n;
  }
}

TEST(Conv2d, WorkspaceIsTheIm2colMatrix) {
  const Conv2dShape s{64, 14, 14, 32, 64};
  EXPECT_EQ(conv2d_workspace_floats(s), size_t{64} * 14 * 14 * 3 * 3 * 32);
  const Conv2dShape strided{2, 9, 7, 3, 4, 5, 3, 2, 0, 1};  // out 3 x 4
  EXPECT_EQ(conv2d_workspace_floats(strided), size_t{2} * 3 * 4 * 5 * 3 * 3);
}

TEST(Conv2d, EmptyBatchWritesNothing) {
  const Conv2dShape s{0, 5, 5, 2, 3};
  std::vector<float> dw(w_size(s), 1.0f), db(3, 1.0f);
  conv2d_forward_cpu(s, nullptr, dw.data(), db.data(), nullptr, nullptr);
  conv2d_backward_cpu(s, nullptr, dw.data(), nullptr, nullptr, dw.data(), db.data(), nullptr);
  EXPECT_EQ(dw, std::vector<float>(w_size(s), 1.0f));
}

TEST(Conv2d, RejectsBadShapes) {
  EXPECT_THROW(conv2d_workspace_floats({1, 2, 2, 1, 1, 5, 5, 1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(conv2d_workspace_floats({1, 5, 5, 1, 1, 3, 3, 0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(conv2d_workspace_floats({1, 5, 5, 0, 1}), std::invalid_argument);
  EXPECT_THROW(conv2d_workspace_floats({1, 5, 5, 1, 1, 3, 3, 1, -1, 1}), std::invalid_argument);
  EXPECT_THROW(conv2d_forward_cpu({-1, 5, 5, 1, 1}, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::kernels
