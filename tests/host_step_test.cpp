// HostStep: the loss a CPU step adds up and the gradient it writes, for a model with one
// prediction per row and for a language model's prediction at each of T positions per row, where
// a padding row (mask 0) must add nothing and the mean is per token.
#include "runtime/train/host_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace lockstep;

namespace {

// -log softmax(logits)[label] over `classes` values, in double.
double cross_entropy(const float* logits, int classes, int label) {
  double mx = logits[0], sum = 0;
  for (int c = 1; c < classes; ++c) mx = std::max(mx, static_cast<double>(logits[c]));
  for (int c = 0; c < classes; ++c) sum += std::exp(logits[c] - mx);
  return std::log(sum) + mx - logits[label];
}

TEST(HostStep, TokenLossIsTheMeanOverTheValidRowsPositions) {
  const int classes = 3, T = 2, rows = 3;
  HostStep step({/*input_size=*/T, classes, /*max_rows=*/4, /*classification=*/true, T});
  Batch b;
  b.rows = rows;
  b.valid = 2;
  b.mask = {1, 1, 0};
  b.labels = {2, 1, 0, 1, 0, 0};  // row-major [rows, T]; the padding row's are 0
  const std::vector<float> logits = {0.5f, -1.f, 2.f, 1.f,  0.f, 0.f,    // row 0, positions 0, 1
                                     0.f,  3.f,  0.f, -2.f, 1.f, 0.5f,   // row 1
                                     9.f,  -9.f, 4.f, 7.f,  7.f, -7.f};  // padding: counts nothing
  double want = 0;
  for (int p = 0; p < 4; ++p) want += cross_entropy(&logits[p * classes], classes, b.labels[p]);
  const float scale = 1.0f / (2 * T);  // the trainer's: 1 / (valid rows * positions)
  std::vector<float> dout(logits.size(), 42.0f);
  step.loss(b, logits.data(), scale, dout.data());
  const Step::Outcome o = step.finish(nullptr, 0);
  EXPECT_EQ(o.totals.samples, 4.0) << "valid rows * positions";
  EXPECT_NEAR(o.totals.mean_loss(), want / 4, 1e-6);
  // Argmax is right at row 0 position 0 (class 2) and row 1 position 1 (class 1).
  EXPECT_EQ(o.totals.accuracy(), 0.5);
  for (size_t i = 4 * classes; i < dout.size(); ++i) EXPECT_EQ(dout[i], 0.0f) << i;
  // Each valid prediction's gradient sums to zero and its label's entry is scale * (p - 1) < 0.
  for (int p = 0; p < 4; ++p) {
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += dout[static_cast<size_t>(p * classes + c)];
    EXPECT_NEAR(sum, 0.0, 1e-6);
    const double p_label = std::exp(-cross_entropy(&logits[p * classes], classes, b.labels[p]));
    EXPECT_NEAR(dout[static_cast<size_t>(p * classes + b.labels[p])], scale * (p_label - 1), 1e-6);
  }
  EXPECT_EQ(step.finish(nullptr, 0).totals.samples, 0.0) << "finish() starts new totals";
}

TEST(HostStep, OnePredictionPerRowCountsRows) {
  HostStep step({/*input_size=*/1, /*outputs=*/2, /*max_rows=*/2, true});
  Batch b;
  b.rows = 2;
  b.valid = 1;
  b.mask = {1, 0};
  b.labels = {1, 0};
  const std::vector<float> logits = {0.f, 1.f, 5.f, 0.f};
  step.loss(b, logits.data(), 0.0f, nullptr);
  const LossTotals t = step.finish(nullptr, 0).totals;
  EXPECT_EQ(t.samples, 1.0);
  EXPECT_NEAR(t.loss_sum, cross_entropy(logits.data(), 2, 1), 1e-6);
}

}  // namespace
