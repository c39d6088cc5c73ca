#include "kernels/gpt/layernorm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/parallel.h"

namespace lockstep::kernels {

void check_layernorm_shape(const LayerNormShape& s, const char* who) {
  if (s.rows < 0 || s.dim <= 0)
    throw std::invalid_argument(std::string(who) + ": rows must be >= 0 and dim > 0");
}

namespace {

// A row's sum in double, f(j) for j < n, in kLanes interleaved partial sums added in lane order:
// independent chains the compiler vectorises instead of one add waiting on the last, in an order
// fixed by the code (the same bits on every CPU and at any thread count).
constexpr int kLanes = 8;
template <class F>
double lane_sum(int n, F f) {
  double part[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += f(j + l);
  for (int l = 0; j < n; ++j, ++l) part[l] += f(j);
  double sum = 0;
  for (double p : part) sum += p;
  return sum;
}

}  // namespace

void layernorm_forward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                           const float* beta, float* y, float* mean, float* rstd) {
  check_layernorm_shape(s, "layernorm_forward_cpu");
  LS_PARALLEL_FOR
  for (int r = 0; r < s.rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * s.dim;
    float* yr = y + static_cast<size_t>(r) * s.dim;
    // Two passes (mean, then squared deviations): no cancellation as in E[x^2] - E[x]^2.
    const double sum = lane_sum(s.dim, [&](int j) { return static_cast<double>(xr[j]); });
    const float m = static_cast<float>(sum / s.dim);
    const double var = lane_sum(s.dim, [&](int j) {
      const double d = xr[j] - m;
      return d * d;
    });
    const float rs = static_cast<float>(1.0 / std::sqrt(var / s.dim + kLayerNormEps));
    for (int j = 0; j < s.dim; ++j) yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
    mean[r] = m;
    rstd[r] = rs;
  }
}

void layernorm_backward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                            const float* mean, const float* rstd, const float* dy, float* dx,
                            float* dgamma, float* dbeta) {
  check_layernorm_shape(s, "layernorm_backward_cpu");
  // dx row by row; then dgamma and dbeta column by column, each column summing its rows in order
  // (the same order, and bits, at any thread count).
  if (dx != nullptr) {
    LS_PARALLEL_FOR
    for (int r = 0; r < s.rows; ++r) {
      const size_t off = static_cast<size_t>(r) * s.dim;
      const float* xr = x + off;
      const float* dyr = dy + off;
      const float m = mean[r], rs = rstd[r];
      // sum_j g and sum_j g * xhat
      const double g_sum =
          lane_sum(s.dim, [&](int j) { return static_cast<double>(dyr[j] * gamma[j]); });
      const double gx_sum = lane_sum(s.dim, [&](int j) {
        const float xhat = (xr[j] - m) * rs;
        const float g = dyr[j] * gamma[j];
        return static_cast<double>(g) * xhat;
      });
      const float g_mean = static_cast<float>(g_sum / s.dim);
      const float gx_mean = static_cast<float>(gx_sum / s.dim);
      for (int j = 0; j < s.dim; ++j) {
        const float xhat = (xr[j] - m) * rs;
        dx[off + j] = rs * (dyr[j] * gamma[j] - g_mean - xhat * gx_mean);
      }
    }
  }
  if (dgamma == nullptr && dbeta == nullptr) return;
  constexpr int kColumns = 16;  // a cache line of floats per block
  const int blocks = (s.dim + kColumns - 1) / kColumns;
  LS_PARALLEL_FOR
  for (int b = 0; b < blocks; ++b) {
    const int j0 = b * kColumns, j1 = std::min(s.dim, j0 + kColumns);
    for (int r = 0; r < s.rows; ++r) {
      const size_t off = static_cast<size_t>(r) * s.dim;
      const float m = mean[r], rs = rstd[r];
      for (int j = j0; j < j1; ++j) {
        const float xhat = (x[off + j] - m) * rs;
        if (dgamma != nullptr) dgamma[j] += dy[off + j] * xhat;
        if (dbeta != nullptr) dbeta[j] += dy[off + j];
      }
    }
  }
}

}  // namespace lockstep::kernels
