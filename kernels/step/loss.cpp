#include "kernels/step/loss.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.h"

namespace lockstep::kernels {

namespace {

constexpr size_t kLossRowGrain = 256;  // rows per thread, at least

void check_sizes(int batch, int width, const char* who) {
  if (batch < 0 || width <= 0)
    throw std::invalid_argument(std::string(who) + ": batch must be >= 0 and classes/dim > 0");
}

}  // namespace

LossTotals softmax_cross_entropy_cpu(const float* logits, const int32_t* labels,
                                     const float* weights, int batch, int classes, float scale,
                                     float* dlogits) {
  check_sizes(batch, classes, "softmax_cross_entropy_cpu");
  // All labels are checked before anything is written: a bad one leaves dlogits untouched.
  for (int i = 0; i < batch; ++i) {
    if (labels[i] < 0 || labels[i] >= classes)
      throw std::out_of_range("softmax_cross_entropy_cpu: label " + std::to_string(labels[i]) +
                              " of sample " + std::to_string(i) + " is outside [0, " +
                              std::to_string(classes) + ")");
  }
  // Rows spread over the threads, each row's loss kept; the totals then add them in row order
  // (the same bits at any thread count).
  thread_local std::vector<double> row_loss;
  thread_local std::vector<char> row_correct;
  row_loss.resize(static_cast<size_t>(batch));
  row_correct.resize(static_cast<size_t>(batch));
  double* losses = row_loss.data();
  char* correct = row_correct.data();
  parallel_chunks(static_cast<size_t>(batch), kLossRowGrain, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const float wt = weights != nullptr ? weights[i] : 1.0f;
      const float* l = logits + i * classes;
      float* d = dlogits != nullptr ? dlogits + i * classes : nullptr;
      // A zero-weight row (padding of a partial batch) may hold anything, even non-finite logits:
      // it is skipped rather than multiplied by 0, which would turn inf into NaN.
      if (wt == 0.0f) {
        if (d != nullptr) std::fill_n(d, classes, 0.0f);
        continue;  // not counted
      }
      int best = 0;
      for (int j = 1; j < classes; ++j) best = l[j] > l[best] ? j : best;
      const float top = l[best];
      // With the row max subtracted every exponent is <= 0: exp cannot overflow, and the max term
      // contributes exactly 1, so the log below is of a number in [1, classes].
      double sum = 0.0;
      for (int j = 0; j < classes; ++j) {
        const float e = std::exp(l[j] - top);
        if (d != nullptr) d[j] = e;
        sum += e;
      }
      const int label = labels[i];
      losses[i] = std::log(sum) - (static_cast<double>(l[label]) - top);
      correct[i] = best == label;
      if (d != nullptr) {
        const float c = static_cast<float>(scale * wt / sum);
        for (int j = 0; j < classes; ++j) d[j] *= c;
        d[label] -= scale * wt;
      }
    }
  });
  LossTotals r;
  for (int i = 0; i < batch; ++i) {
    const float wt = weights != nullptr ? weights[i] : 1.0f;
    if (wt == 0.0f) continue;
    r.loss_sum += wt * losses[i];
    if (correct[i]) r.correct += wt;
  }
  return r;
}

LossTotals mse_cpu(const float* pred, const float* target, const float* weights, int batch, int dim,
                   float scale, float* dpred) {
  check_sizes(batch, dim, "mse_cpu");
  LossTotals r;
  for (int i = 0; i < batch; ++i) {
    const float wt = weights != nullptr ? weights[i] : 1.0f;
    const size_t off = static_cast<size_t>(i) * dim;
    if (wt == 0.0f) {
      if (dpred != nullptr) std::fill_n(dpred + off, dim, 0.0f);
      continue;
    }
    double sq = 0.0;
    for (int j = 0; j < dim; ++j) {
      const double e = static_cast<double>(pred[off + j]) - target[off + j];
      sq += e * e;
    }
    r.loss_sum += wt * sq / dim;
    if (dpred != nullptr) {
      const float c = 2.0f * scale * wt / static_cast<float>(dim);
      for (int j = 0; j < dim; ++j) dpred[off + j] = c * (pred[off + j] - target[off + j]);
    }
  }
  return r;
}

}  // namespace lockstep::kernels
