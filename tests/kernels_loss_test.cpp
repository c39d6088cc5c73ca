// Loss CPU kernels: softmax cross-entropy and MSE against double-precision references, per-sample
// weights (padding rows contribute nothing), scale, numerical stability, bad labels, and the
// gradients against finite differences of the loss itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/onednn/onednn.h"
#include "kernels/parallel.h"
#include "kernels/step/loss.h"

namespace lockstep::kernels {
namespace {

using kernel_test::random_floats;

struct Reference {
  double loss_sum = 0, correct = 0;
  std::vector<double> grad;
};

Reference reference_softmax_ce(const std::vector<float>& logits, const std::vector<int32_t>& labels,
                               const std::vector<float>& weights, int classes, double scale) {
  const int batch = static_cast<int>(labels.size());
  Reference r;
  r.grad.assign(logits.size(), 0.0);
  for (int i = 0; i < batch; ++i) {
    const float* l = &logits[size_t(i) * classes];
    double top = l[0];
    int best = 0;
    for (int j = 1; j < classes; ++j)
      if (l[j] > top) top = l[j], best = j;
    double z = 0;
    for (int j = 0; j < classes; ++j) z += std::exp(l[j] - top);
    const double w = weights[i];
    r.loss_sum += w * (top + std::log(z) - l[labels[i]]);
    if (best == labels[i]) r.correct += w;
    for (int j = 0; j < classes; ++j)
      r.grad[size_t(i) * classes + j] =
          scale * w * (std::exp(l[j] - top) / z - (j == labels[i] ? 1.0 : 0.0));
  }
  return r;
}

std::vector<int32_t> random_labels(int batch, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(batch);
  for (auto& l : v) l = static_cast<int32_t>(rng() % classes);
  return v;
}

TEST(SoftmaxCrossEntropy, MatchesReferenceWithWeightsAndScale) {
  const int batch = 37, classes = 10;
  const auto logits = random_floats(size_t(batch) * classes, 1, -4.0f, 4.0f);
  const auto labels = random_labels(batch, classes, 2);
  auto weights = random_floats(batch, 3, 0.0f, 2.0f);
  weights[5] = 0.0f;
  const float scale = 1.0f / 29.0f;
  const Reference ref = reference_softmax_ce(logits, labels, weights, classes, scale);
  std::vector<float> d(logits.size());
  const LossTotals r = softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(),
                                                 batch, classes, scale, d.data());
  EXPECT_NEAR(r.loss_sum, ref.loss_sum, 1e-5 * ref.loss_sum);
  EXPECT_NEAR(r.correct, ref.correct, 1e-6);
  EXPECT_GT(ref.correct, 0.0);  // the check above must be able to fail
  EXPECT_LT(kernel_test::max_rel_error(d, ref.grad), 1e-6);

  // Null weights mean 1 for every row.
  const std::vector<float> ones(batch, 1.0f);
  const Reference ref1 = reference_softmax_ce(logits, labels, ones, classes, scale);
  const LossTotals r1 = softmax_cross_entropy_cpu(logits.data(), labels.data(), nullptr, batch,
                                                  classes, scale, d.data());
  EXPECT_NEAR(r1.loss_sum, ref1.loss_sum, 1e-5 * ref1.loss_sum);
  EXPECT_EQ(r1.correct, ref1.correct);
  EXPECT_LT(kernel_test::max_rel_error(d, ref1.grad), 1e-6);
}

// Rows spread over the threads (GPT batches: thousands of positions), the totals added in row
// order: the same bits at 1 and 2 threads, and the reference's figures, padding rows included.
TEST(SoftmaxCrossEntropy, SameBitsAtAnyThreadCount) {
  if (!onednn_built()) GTEST_SKIP() << "a build without oneDNN has no OpenMP threads to compare";
  const int batch = 3001, classes = 37;
  const auto logits = random_floats(size_t(batch) * classes, 31, -4.0f, 4.0f);
  const auto labels = random_labels(batch, classes, 32);
  std::vector<float> weights(batch, 1.0f);
  for (int i = 0; i < batch; i += 7) weights[i] = 0.0f;
  const Reference want = reference_softmax_ce(logits, labels, weights, classes, 0.5);
  LossTotals got[2];
  std::vector<float> grad[2];
  for (int threads : {1, 2}) {
    onednn_set_threads(threads);
    const int i = threads - 1;
    grad[i].assign(logits.size(), std::nanf(""));
    got[i] = softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(), batch, classes,
                                       0.5f, grad[i].data());
  }
  onednn_set_threads(1);
  EXPECT_EQ(got[0].loss_sum, got[1].loss_sum);
  EXPECT_EQ(got[0].correct, got[1].correct);
  EXPECT_EQ(grad[0], grad[1]);
  EXPECT_NEAR(got[0].loss_sum, want.loss_sum, 1e-6 * want.loss_sum);
  EXPECT_EQ(got[0].correct, want.correct);
  EXPECT_LT(kernel_test::max_rel_error(grad[0], want.grad), 1e-5);
}

// A row's best column is the first that holds its largest logit, wherever the vectors put it
// (the same lane, other lanes, the last columns past the vectors), as the reference's scan finds
// it.
TEST(SoftmaxCrossEntropy, TheFirstLargestColumnIsTheRowsAnswer) {
  const int classes = 37;  // vectors of 16, 8 or 4, and columns after them
  // (columns holding the row's largest logit, the label): the first of them is the best column.
  const std::vector<std::pair<std::vector<int>, int>> rows = {
      {{3, 20}, 3},  {{3, 20}, 20}, {{1, 17}, 1}, {{1, 17}, 17},      {{2, 35}, 2},
      {{2, 35}, 35}, {{36}, 36},    {{0, 36}, 0}, {{33, 34, 35}, 33}, {{9, 25, 36}, 25}};
  std::vector<float> logits = random_floats(rows.size() * classes, 41, -3.0f, 3.0f);
  // Row i weighs 2^i: the weighted count of right answers says which rows were right.
  std::vector<int32_t> labels;
  std::vector<float> weights;
  double want_correct = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int c : rows[i].first) logits[i * classes + c] = 5.0f;
    labels.push_back(rows[i].second);
    weights.push_back(static_cast<float>(1 << i));
    if (rows[i].first.front() == rows[i].second) want_correct += weights.back();
  }
  const Reference ref = reference_softmax_ce(logits, labels, weights, classes, 1.0);
  ASSERT_EQ(ref.correct, want_correct);
  const LossTotals r =
      softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(),
                                static_cast<int>(rows.size()), classes, 1.0f, nullptr);
  EXPECT_EQ(r.correct, want_correct);
  EXPECT_NEAR(r.loss_sum, ref.loss_sum, 1e-6 * ref.loss_sum);
}

// The row's exponentials are summed in the same order in every vector build: AVX2 gives the
// AVX-512 build's bits (both contract products alike), the baseline build stays near them.
TEST(SoftmaxCrossEntropy, Avx2GivesTheAvx512BuildsBits) {
  const CpuIsa cap = cpu_isa_cap().load();
  for (int classes : {5, 37, 300}) {
    SCOPED_TRACE(classes);
    const int batch = 40;
    // Exponentials from 1 down to e^-80: their sums round in double, so the order shows.
    const auto logits = random_floats(size_t(batch) * classes, 51, -80.0f, 0.0f);
    const auto labels = random_labels(batch, classes, 52);
    std::vector<std::pair<LossTotals, std::vector<float>>> got;
    for (CpuIsa isa : {CpuIsa::native, CpuIsa::avx2, CpuIsa::baseline}) {
      set_cpu_isa_cap(isa);
      std::vector<float> d(logits.size());
      const LossTotals r = softmax_cross_entropy_cpu(logits.data(), labels.data(), nullptr, batch,
                                                     classes, 0.5f, d.data());
      got.emplace_back(r, d);
    }
    set_cpu_isa_cap(cap);
    if (cpu_avx512f() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      EXPECT_EQ(got[0].first.loss_sum, got[1].first.loss_sum);
      EXPECT_EQ(got[0].second, got[1].second);
    }
    EXPECT_NEAR(got[2].first.loss_sum, got[0].first.loss_sum, 1e-6 * got[0].first.loss_sum);
    EXPECT_LT(kernel_test::max_rel_error(got[2].second, got[0].second), 1e-5);
    EXPECT_EQ(got[2].first.correct, got[0].first.correct);
  }
}

TEST(SoftmaxCrossEntropy, ZeroWeightRowsContributeNothing) {
  const int batch = 8, classes = 5;
  auto logits = random_floats(size_t(batch) * classes, 4);
  const auto labels = random_labels(batch, classes, 5);
  std::vector<float> weights(batch, 1.0f);
  std::vector<float> d_real(logits.size());
  // The first 5 rows alone...
  const LossTotals real = softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(), 5,
                                                    classes, 0.5f, d_real.data());
  // ...and the same rows followed by 3 padding rows holding garbage, even inf and NaN.
  for (int i = 5; i < batch; ++i) weights[i] = 0.0f;
  logits[5 * classes] = std::numeric_limits<float>::infinity();
  logits[6 * classes + 1] = std::nanf("");
  logits[7 * classes + 2] = 1e30f;
  std::vector<float> d(logits.size(), 3.0f);
  const LossTotals padded = softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(),
                                                      batch, classes, 0.5f, d.data());
  EXPECT_EQ(padded.loss_sum, real.loss_sum);
  EXPECT_EQ(padded.correct, real.correct);
  for (size_t i = 0; i < d.size(); ++i)
    ASSERT_EQ(d[i], i < d_real.size() ? d_real[i] : 0.0f) << "dlogits[" << i << "]";
}

TEST(SoftmaxCrossEntropy, HugeLogitsStayFinite) {
  const int classes = 3;
  const std::vector<float> logits = {1e30f,   0.0f, -1e30f,  // confident and right
                                     1000.0f, 0.0f, -1000.0f, std::numeric_limits<float>::max(),
                                     0.0f,    0.0f};
  const std::vector<int32_t> labels = {0, 1, 2};
  std::vector<float> d(logits.size());
  const LossTotals r =
      softmax_cross_entropy_cpu(logits.data(), labels.data(), nullptr, 3, classes, 1.0f, d.data());
  // Row 0 loss 0; row 1 loss 1000; row 2 loss = float max (finite, and it must not be inf).
  const double expect = 1000.0 + std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(r.loss_sum));
  EXPECT_NEAR(r.loss_sum, expect, 1e-6 * expect);
  EXPECT_EQ(r.correct, 1.0);
  for (float g : d) ASSERT_TRUE(std::isfinite(g));
  EXPECT_NEAR(d[3], 1.0f, 1e-6);   // softmax of row 1 is one-hot on class 0
  EXPECT_NEAR(d[4], -1.0f, 1e-6);  // minus the one-hot label
}

TEST(SoftmaxCrossEntropy, BadLabelThrowsAndWritesNothing) {
  const auto logits = random_floats(12, 6);
  std::vector<float> d(12, 4.0f);
  for (int32_t bad : {-1, 4, 1000}) {
    const std::vector<int32_t> labels = {0, 3, bad};
    EXPECT_THROW(
        softmax_cross_entropy_cpu(logits.data(), labels.data(), nullptr, 3, 4, 1.0f, d.data()),
        std::out_of_range)
        << bad;
  }
  EXPECT_EQ(d, std::vector<float>(12, 4.0f));
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  const int batch = 6, classes = 7;
  auto logits = random_floats(size_t(batch) * classes, 7, -3.0f, 3.0f);
  const auto labels = random_labels(batch, classes, 8);
  const auto weights = random_floats(batch, 9, 0.5f, 1.5f);
  const float scale = 0.25f;
  std::vector<float> d(logits.size());
  softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(), batch, classes, scale,
                            d.data());
  auto objective = [&] {
    return scale * softmax_cross_entropy_cpu(logits.data(), labels.data(), weights.data(), batch,
                                             classes, scale, nullptr)
                       .loss_sum;
  };
  kernel_test::expect_gradient(logits, d, objective, {.step = 1e-2, .abs_tol = 2e-4, .samples = 42},
                               "dlogits");
}

TEST(Mse, MatchesReferenceAndFiniteDifferences) {
  const int batch = 9, dim = 4;
  auto pred = random_floats(size_t(batch) * dim, 10);
  const auto target = random_floats(pred.size(), 11);
  auto weights = random_floats(batch, 12, 0.0f, 2.0f);
  weights[2] = 0.0f;
  const float scale = 1.0f / 7.0f;
  double loss = 0;
  std::vector<double> grad(pred.size());
  for (int i = 0; i < batch; ++i)
    for (int j = 0; j < dim; ++j) {
      const size_t k = size_t(i) * dim + j;
      const double e = double(pred[k]) - target[k];
      loss += weights[i] * e * e / dim;
      grad[k] = scale * weights[i] * 2.0 * e / dim;
    }
  std::vector<float> d(pred.size());
  const LossTotals r =
      mse_cpu(pred.data(), target.data(), weights.data(), batch, dim, scale, d.data());
  EXPECT_NEAR(r.loss_sum, loss, 1e-6 * loss);
  EXPECT_EQ(r.correct, 0.0);
  EXPECT_LT(kernel_test::max_rel_error(d, grad), 1e-6);
  auto objective = [&] {
    return scale *
           mse_cpu(pred.data(), target.data(), weights.data(), batch, dim, scale, nullptr).loss_sum;
  };
  kernel_test::expect_gradient(pred, d, objective, {.abs_tol = 1e-5, .samples = 36}, "dpred");
}

TEST(Mse, ZeroWeightRowsContributeNothing) {
  const int dim = 3;
  std::vector<float> pred = {1, 2, 3, std::nanf(""), 1e30f, 0};
  const std::vector<float> target = {0, 2, 5, 0, 0, 0};
  const std::vector<float> weights = {1, 0};
  std::vector<float> d(6, 9.0f);
  const LossTotals r = mse_cpu(pred.data(), target.data(), weights.data(), 2, dim, 1.0f, d.data());
  EXPECT_DOUBLE_EQ(r.loss_sum, (1.0 + 0.0 + 4.0) / 3.0);
  EXPECT_EQ(d[3], 0.0f);
  EXPECT_EQ(d[4], 0.0f);
  EXPECT_EQ(d[5], 0.0f);
  EXPECT_FLOAT_EQ(d[2], 2.0f * -2.0f / 3.0f);
}

}  // namespace
}  // namespace lockstep::kernels
