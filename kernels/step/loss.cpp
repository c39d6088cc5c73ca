#include "kernels/step/loss.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.h"

#include "kernels/gpt/gelu_math.h"
#include "kernels/lanes16.h"

namespace lockstep::kernels {

namespace {

using lanes16::load;
using lanes16::store;

constexpr size_t kLossRowGrain = 256;  // rows per thread, at least

void check_sizes(int batch, int width, const char* who) {
  if (batch < 0 || width <= 0)
    throw std::invalid_argument(std::string(who) + ": batch must be >= 0 and classes/dim > 0");
}

// The exponentials' sum of a row is kept in kSumLanes partial sums in double (lane k adds the
// columns k, k + kSumLanes, ... in order; the lanes are then added in order, then the last
// columns): the same order in every vector build, so AVX2 and AVX-512 give the same bits.
constexpr int kSumLanes = 16;

// Rows [i0, i1) of softmax_cross_entropy_cpu: each row's largest logit and its first column, the
// exponentials (gelu_math.h's exp: a polynomial that vectorises, within 2 ulp of expf) written to
// d and summed, the row's loss and whether its best column is the label, and d scaled into the
// gradient.
void softmax_rows(const float* logits, const int32_t* labels, const float* weights, int classes,
                  float scale, float* dlogits, double* losses, char* correct, size_t i0,
                  size_t i1) {
  widest_build([=](auto w) LS_BUILD_LAMBDA {
    constexpr int W = decltype(w)::value;
    using V = typename lanes16::Lanes<W>::F;
    using I = typename lanes16::Lanes<W>::I;
    typedef double D __attribute__((vector_size(8 * W)));
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
      // The largest logit and the first column holding it: each lane keeps its first largest,
      // the lanes then agree on the value and the smallest column, and the tail (later columns)
      // replaces them only when strictly larger.
      int j = 0, best = 0;
      float top = l[0];
      if (classes >= W) {
        V mx = load<V>(l);
        I at, col;
        for (int k = 0; k < W; ++k) at[k] = col[k] = k;
        for (j = W; j + W <= classes; j += W) {
          col += W;
          const V v = load<V>(l + j);
          const I more = v > mx;
          mx = more ? v : mx;
          at = more ? col : at;
        }
        top = mx[0], best = at[0];
        for (int k = 1; k < W; ++k)
          if (mx[k] > top || (mx[k] == top && at[k] < best)) top = mx[k], best = at[k];
      } else {
        j = 1;
      }
      for (; j < classes; ++j)
        if (l[j] > top) top = l[j], best = j;
      // With the row max subtracted every exponent is <= 0: exp cannot overflow, and the max term
      // contributes 1, so the log below is of a number in [1, classes].
      D part[kSumLanes / W] = {};
      j = 0;
      for (; j + kSumLanes <= classes; j += kSumLanes)
        for (int g = 0; g < kSumLanes / W; ++g) {
          const V e = gelu_math::exp_poly(load<V>(l + j + g * W) - top);
          if (d != nullptr) store(d + j + g * W, e);
          part[g] += __builtin_convertvector(e, D);
        }
      double sum = 0.0;
      for (int k = 0; k < kSumLanes; ++k) sum += part[k / W][k % W];
      for (; j < classes; ++j) {
        const float e = gelu_math::exp_poly(l[j] - top);
        if (d != nullptr) d[j] = e;
        sum += e;
      }
      const int label = labels[i];
      losses[i] = std::log(sum) - (static_cast<double>(l[label]) - top);
      correct[i] = best == label;
      if (d != nullptr) {
        const float c = static_cast<float>(scale * wt / sum);
        for (int k = 0; k < classes; ++k) d[k] *= c;
        d[label] -= scale * wt;
      }
    }
  });
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
    softmax_rows(logits, labels, weights, classes, scale, dlogits, losses, correct, i0, i1);
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
