// Helpers for the CPU kernel tests: seeded random buffers and a finite-difference gradient check.
// Header-only so that each kernels_*_test binary needs nothing beyond the shared test main. The
// per-op double-precision references live in the test file of their op.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace lockstep::kernel_test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// sum_i r[i] * y[i] in double: the scalar objective whose gradient with respect to y is r.
inline double dot(const std::vector<double>& r, const float* y, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += r[i] * y[i];
  return s;
}

// Up to `count` distinct indices of [0, n), always including the first and the last.
inline std::vector<size_t> sample_indices(size_t n, size_t count, uint32_t seed) {
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  if (n <= count) return all;
  std::mt19937 rng(seed);
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  all.resize(count - 1);
  all.push_back(n - 1);
  return all;
}

struct GradCheck {
  double step = 1e-2;     // perturbation of one input
  double abs_tol = 1e-3;  // |numeric - analytic| <= abs_tol + rel_tol * |analytic|
  double rel_tol = 1e-3;
  size_t samples = 48;  // inputs checked (all of them for small tensors)
};

// Central differences of objective() with respect to x[j], for a sample of j, compared with the
// analytic gradient. The objective evaluates the float kernel on the current contents of x; the
// step actually taken is measured in float, so rounding of x[j] + h does not bias the quotient.
template <class Objective>
void expect_gradient(std::vector<float>& x, const std::vector<float>& analytic, Objective objective,
                     const GradCheck& c, const std::string& what) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  for (size_t j : sample_indices(x.size(), c.samples, static_cast<uint32_t>(x.size()))) {
    const float keep = x[j];
    const float up = static_cast<float>(keep + c.step), down = static_cast<float>(keep - c.step);
    x[j] = up;
    const double f_up = objective();
    x[j] = down;
    const double f_down = objective();
    x[j] = keep;
    const double numeric = (f_up - f_down) / (static_cast<double>(up) - down);
    EXPECT_NEAR(numeric, analytic[j], c.abs_tol + c.rel_tol * std::abs(analytic[j]))
        << what << " at index " << j;
  }
}

// max_i |a[i] - b[i]| / (1 + |b[i]|): a single relative error for comparing against a reference.
template <class A, class B>
double max_rel_error(const A& a, const B& b) {
  double e = 0;
  for (size_t i = 0; i < b.size(); ++i)
    e = std::max(e, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])) /
                        (1.0 + std::abs(static_cast<double>(b[i]))));
  return e;
}

// NHWC [n, h, w, c] to oneDNN's 16-channel blocks [n, c / 16, h, w, 16] (c a multiple of 16),
// and back.
inline size_t blocked16_index(int h, int w, int c, int img, int y, int x, int ch) {
  return ((((static_cast<size_t>(img) * (c / 16) + ch / 16) * h + y) * w + x) * 16) + ch % 16;
}
// One pass over every element, copying NHWC -> blocked (to_blocked = true) or back.
inline std::vector<float> blocked16_copy(const std::vector<float>& v, int n, int h, int w, int c,
                                         bool to_blocked) {
  std::vector<float> out(v.size());
  for (int img = 0; img < n; ++img)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < c; ++ch) {
          const size_t nhwc = ((static_cast<size_t>(img) * h + y) * w + x) * c + ch;
          const size_t blocked = blocked16_index(h, w, c, img, y, x, ch);
          out[to_blocked ? blocked : nhwc] = v[to_blocked ? nhwc : blocked];
        }
  return out;
}
inline std::vector<float> to_blocked16(const std::vector<float>& v, int n, int h, int w, int c) {
  return blocked16_copy(v, n, h, w, c, true);
}
inline std::vector<float> from_blocked16(const std::vector<float>& b, int n, int h, int w, int c) {
  return blocked16_copy(b, n, h, w, c, false);
}

}  // namespace lockstep::kernel_test
