// Optimizer CPU kernels over a few steps against plain double-precision loops written from the
// textbook update rules, plus the global-norm clipping helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernel_reference.h"
#include "kernels/step/optimizer.h"

namespace lockstep::kernels {
namespace {

using kernel_test::random_floats;

constexpr size_t kN = 1029;  // not a multiple of any vector width
constexpr int kSteps = 5;

// A different gradient per step, as in training.
std::vector<float> gradient(int step) { return random_floats(kN, 100 + step, -2.0f, 2.0f); }

void run_sgd(const SgdOptions& o) {
  std::vector<float> p = random_floats(kN, 1), v(kN, 0.0f);
  std::vector<double> pr(p.begin(), p.end()), vr(kN, 0.0);
  for (int t = 0; t < kSteps; ++t) {
    const auto g = gradient(t);
    sgd_update_cpu(o, p.data(), g.data(), o.momentum != 0.0f ? v.data() : nullptr, kN);
    for (size_t i = 0; i < kN; ++i) {
      const double gi = g[i] + double(o.weight_decay) * pr[i];
      if (o.momentum == 0.0f) {
        pr[i] -= double(o.lr) * gi;
        continue;
      }
      vr[i] = o.momentum * vr[i] + gi;
      pr[i] -= o.lr * (o.nesterov ? gi + o.momentum * vr[i] : vr[i]);
    }
  }
  EXPECT_LT(kernel_test::max_rel_error(p, pr), 1e-5);
  if (o.momentum != 0.0f) {
    EXPECT_LT(kernel_test::max_rel_error(v, vr), 1e-5);
  }
}

TEST(Sgd, Plain) { run_sgd({.lr = 0.1f}); }
TEST(Sgd, WeightDecay) { run_sgd({.lr = 0.1f, .weight_decay = 0.01f}); }
TEST(Sgd, Momentum) { run_sgd({.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f}); }
TEST(Sgd, Nesterov) {
  run_sgd({.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true});
}

TEST(Sgd, MomentumNeedsVelocity) {
  std::vector<float> p(4), g(4);
  EXPECT_THROW(sgd_update_cpu({.momentum = 0.9f}, p.data(), g.data(), nullptr, 4),
               std::invalid_argument);
}

void run_adam(AdamOptions o) {
  std::vector<float> p = random_floats(kN, 2), m(kN, 0.0f), v(kN, 0.0f);
  std::vector<double> pr(p.begin(), p.end()), mr(kN, 0.0), vr(kN, 0.0);
  for (int t = 1; t <= kSteps; ++t) {
    const auto g = gradient(t);
    o.step = t;
    adam_update_cpu(o, p.data(), g.data(), m.data(), v.data(), kN);
    const double b1 = o.beta1, b2 = o.beta2, lr = o.lr, wd = o.weight_decay;
    for (size_t i = 0; i < kN; ++i) {
      double gi = g[i];
      if (o.decoupled) {
        pr[i] -= lr * wd * pr[i];
      } else {
        gi += wd * pr[i];
      }
      mr[i] = b1 * mr[i] + (1 - b1) * gi;
      vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
      const double m_hat = mr[i] / (1 - std::pow(b1, t)), v_hat = vr[i] / (1 - std::pow(b2, t));
      pr[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
  EXPECT_LT(kernel_test::max_rel_error(p, pr), 1e-5);
  EXPECT_LT(kernel_test::max_rel_error(m, mr), 1e-5);
  EXPECT_LT(kernel_test::max_rel_error(v, vr), 1e-5);
}

TEST(Adam, Plain) { run_adam({.lr = 1e-2f}); }
TEST(Adam, CoupledWeightDecay) { run_adam({.lr = 1e-2f, .weight_decay = 0.1f}); }
TEST(AdamW, DecoupledWeightDecay) {
  run_adam({.lr = 1e-2f, .weight_decay = 0.1f, .decoupled = true});
}
TEST(Adam, OtherBetas) { run_adam({.lr = 3e-3f, .beta1 = 0.5f, .beta2 = 0.9f, .eps = 1e-6f}); }

TEST(Adam, StepIsOneBased) {
  std::vector<float> p(4), g(4), m(4), v(4);
  EXPECT_THROW(adam_update_cpu({.step = 0}, p.data(), g.data(), m.data(), v.data(), 4),
               std::invalid_argument);
}

TEST(Adam, LateStepsUseFullBiasCorrection) {
  // At step 10^6 both corrections are 1: the update is lr * m / (sqrt(v) + eps).
  std::vector<float> p = {1.0f}, g = {0.5f}, m = {0.2f}, v = {0.04f};
  adam_update_cpu({.lr = 0.1f, .step = 1000000}, p.data(), g.data(), m.data(), v.data(), 1);
  const double mr = 0.9 * 0.2 + 0.1 * 0.5, vr = 0.999 * 0.04 + 0.001 * 0.25;
  EXPECT_NEAR(p[0], 1.0 - 0.1 * mr / (std::sqrt(vr) + 1e-8), 1e-6);
}

TEST(GlobalNorm, MatchesDoubleSum) {
  const auto g = random_floats(100003, 3);
  double sq = 0;
  for (float x : g) sq += double(x) * x;
  EXPECT_NEAR(global_norm_cpu(g.data(), g.size()), std::sqrt(sq), 1e-10 * std::sqrt(sq));
  EXPECT_EQ(global_norm_cpu(g.data(), 0), 0.0);
  const std::vector<float> pyth = {3.0f, 4.0f, 12.0f};
  EXPECT_DOUBLE_EQ(global_norm_cpu(pyth.data(), 3), 13.0);
}

TEST(GlobalNorm, ScaleMultipliesEveryElement) {
  auto x = random_floats(37, 4);
  const auto x0 = x;
  scale_cpu(x.data(), x.size(), -0.5f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], -0.5f * x0[i]);
}

TEST(GlobalNorm, ClipScalesDownToMaxNormOnly) {
  const auto g0 = random_floats(513, 5);
  const double norm0 = global_norm_cpu(g0.data(), g0.size());

  auto g = g0;  // above the limit: same direction, norm == max_norm
  const double max_norm = norm0 / 4;
  EXPECT_DOUBLE_EQ(clip_by_global_norm_cpu(g.data(), g.size(), max_norm), norm0);
  EXPECT_NEAR(global_norm_cpu(g.data(), g.size()), max_norm, 1e-6 * max_norm);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], g0[i] / 4, 1e-7);

  g = g0;  // below the limit, or clipping off: untouched
  EXPECT_DOUBLE_EQ(clip_by_global_norm_cpu(g.data(), g.size(), 2 * norm0), norm0);
  EXPECT_EQ(g, g0);
  EXPECT_DOUBLE_EQ(clip_by_global_norm_cpu(g.data(), g.size(), 0.0), norm0);
  EXPECT_EQ(g, g0);
}

}  // namespace
}  // namespace lockstep::kernels
