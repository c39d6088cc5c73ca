// Dense CPU kernel (gemm through BLAS) against double-precision loops, and its backward pass
// against that reference and against finite differences of the forward kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/dense.h"
#include "kernels/onednn/onednn.h"

namespace lockstep::kernels {
namespace {

using kernel_test::max_rel_error;
using kernel_test::random_floats;

struct Case {
  const char* name;
  DenseShape s;
};

const Case kCases[] = {
    {"scalar", {1, 1, 1}},        {"odd", {5, 7, 3}},       {"wide", {3, 17, 33}},
    {"cnn_head", {64, 3136, 10}}, {"blocks", {37, 9, 150}},  // the bias gradient's column blocks:
                                                             // two full ones and a part
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Float sums over up to 3136 terms of magnitude ~1 against double: relative error ~ 1e-5 is
// rounding; any indexing mistake is of order 1.
constexpr double kTol = 1e-4;

class DenseCase : public ::testing::TestWithParam<Case> {};

TEST_P(DenseCase, ForwardMatchesReference) {
  const DenseShape s = GetParam().s;
  const auto x = random_floats(size_t(s.batch) * s.in, 1),
             w = random_floats(size_t(s.in) * s.out, 2);
  const auto b = random_floats(s.out, 3);
  std::vector<double> ref(size_t(s.batch) * s.out), ref_nob(ref.size());
  for (int i = 0; i < s.batch; ++i)
    for (int j = 0; j < s.out; ++j) {
      double acc = 0;
      for (int k = 0; k < s.in; ++k)
        acc += double(x[size_t(i) * s.in + k]) * w[size_t(k) * s.out + j];
      ref_nob[size_t(i) * s.out + j] = acc;
      ref[size_t(i) * s.out + j] = acc + b[j];
    }
  std::vector<float> y(ref.size(), 5.0f);
  dense_forward_cpu(s, x.data(), w.data(), b.data(), y.data());
  EXPECT_LT(max_rel_error(y, ref), kTol);
  dense_forward_cpu(s, x.data(), w.data(), nullptr, y.data());
  EXPECT_LT(max_rel_error(y, ref_nob), kTol);
}

TEST_P(DenseCase, BackwardMatchesReferenceAndAccumulates) {
  const DenseShape s = GetParam().s;
  const auto x = random_floats(size_t(s.batch) * s.in, 4),
             w = random_floats(size_t(s.in) * s.out, 5);
  const auto dy = random_floats(size_t(s.batch) * s.out, 6);
  const auto dw0 = random_floats(w.size(), 7), db0 = random_floats(s.out, 8);
  std::vector<double> dx_ref(x.size(), 0.0), dw_ref(dw0.begin(), dw0.end()),
      db_ref(db0.begin(), db0.end());
  for (int i = 0; i < s.batch; ++i)
    for (int k = 0; k < s.in; ++k)
      for (int j = 0; j < s.out; ++j) {
        const double g = dy[size_t(i) * s.out + j];
        dx_ref[size_t(i) * s.in + k] += g * w[size_t(k) * s.out + j];
        dw_ref[size_t(k) * s.out + j] += g * x[size_t(i) * s.in + k];
        if (k == 0) db_ref[j] += g;
      }
  std::vector<float> dx(x.size(), std::nanf("")), dw = dw0, db = db0;
  dense_backward_cpu(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  EXPECT_LT(max_rel_error(dx, dx_ref), kTol);
  EXPECT_LT(max_rel_error(dw, dw_ref), kTol);
  EXPECT_LT(max_rel_error(db, db_ref), kTol);

  dw = dw0;
  db = db0;
  dense_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw.data(), db.data());
  EXPECT_LT(max_rel_error(dw, dw_ref), kTol);
  EXPECT_LT(max_rel_error(db, db_ref), kTol);
}

TEST_P(DenseCase, BackwardMatchesFiniteDifferences) {
  const DenseShape s = GetParam().s;
  auto x = random_floats(size_t(s.batch) * s.in, 9), w = random_floats(size_t(s.in) * s.out, 10);
  auto b = random_floats(s.out, 11);
  const auto r = kernel_test::to_double(random_floats(size_t(s.batch) * s.out, 12));
  const std::vector<float> rf(r.begin(), r.end());
  std::vector<float> y(r.size());
  auto objective = [&] {
    dense_forward_cpu(s, x.data(), w.data(), b.data(), y.data());
    return kernel_test::dot(r, y.data(), y.size());
  };
  std::vector<float> dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  dense_backward_cpu(s, x.data(), w.data(), rf.data(), dx.data(), dw.data(), db.data());
  const kernel_test::GradCheck check;
  kernel_test::expect_gradient(x, dx, objective, check, "dx");
  kernel_test::expect_gradient(w, dw, objective, check, "dw");
  kernel_test::expect_gradient(b, db, objective, check, "db");
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseCase, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The bias gradient adds each row to db in row order whatever the column blocks and threads: the
// bits of a plain float loop, at one thread and at two, beside either kernel's products.
TEST(Dense, BiasGradientAddsRowsInOrderAtAnyThreadCount) {
  const DenseShape s{301, 5, 150};
  const auto x = random_floats(size_t(s.batch) * s.in, 31),
             w = random_floats(size_t(s.in) * s.out, 32);
  const auto dy = random_floats(size_t(s.batch) * s.out, 33), db0 = random_floats(s.out, 34);
  std::vector<float> expected = db0;
  for (int i = 0; i < s.batch; ++i)
    for (int j = 0; j < s.out; ++j) expected[j] += dy[size_t(i) * s.out + j];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    std::vector<float> dw(w.size(), 0.0f), db = db0;
    dense_backward_cpu(s, x.data(), w.data(), dy.data(), nullptr, dw.data(), db.data());
    EXPECT_EQ(db, expected) << "OpenBLAS kernel, " << threads << " thread(s)";
    if (!onednn_built()) continue;
    db = db0;
    dense_backward_onednn(s, x.data(), w.data(), dy.data(), nullptr, dw.data(), db.data());
    EXPECT_EQ(db, expected) << "oneDNN kernel, " << threads << " thread(s)";
  }
  onednn_set_threads(1);
}

TEST(Dense, RejectsBadShapes) {
  EXPECT_THROW(dense_forward_cpu({2, 0, 3}, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(dense_backward_cpu({-1, 2, 3}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace lockstep::kernels
