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

void layernorm_forward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                           const float* beta, float* y, float* mean, float* rstd) {
  check_layernorm_shape(s, "layernorm_forward_cpu");
  LS_PARALLEL_FOR
  for (int r = 0; r < s.rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * s.dim;
    float* yr = y + static_cast<size_t>(r) * s.dim;
    // Two passes (mean, then squared deviations): no cancellation as in E[x^2] - E[x]^2.
    double sum = 0;
    for (int j = 0; j < s.dim; ++j) sum += xr[j];
    const float m = static_cast<float>(sum / s.dim);
    double var = 0;
    for (int j = 0; j < s.dim; ++j) {
      const double d = xr[j] - m;
      var += d * d;
    }
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
      double g_sum = 0, gx_sum = 0;  // sum_j g, sum_j g * xhat
      for (int j = 0; j < s.dim; ++j) {
        const float xhat = (xr[j] - m) * rs;
        const float g = dyr[j] * gamma[j];
        g_sum += g;
        gx_sum += static_cast<double>(g) * xhat;
      }
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
