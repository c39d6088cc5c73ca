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
// fixed by the code (the same bits at any thread count).
constexpr int kLanes = 8;
template <class F>
LS_ALWAYS_INLINE double lane_sum(int n, F f) {
  double part[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += f(j + l);
  for (int l = 0; j < n; ++j, ++l) part[l] += f(j);
  double sum = 0;
  for (double p : part) sum += p;
  return sum;
}

constexpr size_t kRowGrain = 32;  // rows per thread, at least
constexpr int kColumns = 32;      // the column sums' block: two cache lines of each row

// The loops below are compiled for AVX-512, AVX2 and the baseline and run in the widest build the
// CPU and LOCKSTEP_CPU_ISA allow (parallel.h's widest_build: the library itself is built for the
// baseline); each computes its rows or columns alone, so the split does not change the bits.
void layernorm_forward_rows(int dim, const float* x, const float* gamma, const float* beta,
                            float* y, float* mean, float* rstd, size_t r0, size_t r1) {
  widest_build([=](auto) LS_BUILD_LAMBDA {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      // Two passes (mean, then squared deviations): no cancellation as in E[x^2] - E[x]^2.
      const double sum = lane_sum(dim, [&](int j) { return static_cast<double>(xr[j]); });
      const float m = static_cast<float>(sum / dim);
      const double var = lane_sum(dim, [&](int j) {
        const double d = xr[j] - m;
        return d * d;
      });
      const float rs = static_cast<float>(1.0 / std::sqrt(var / dim + kLayerNormEps));
      for (int j = 0; j < dim; ++j) yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
      mean[r] = m;
      rstd[r] = rs;
    }
  });
}

// dx for rows [r0, r1); with dgamma or dbeta, those rows' terms added to them as well, row after
// row (column_block's additions in column_block's order: the same bits as the column pass).
void layernorm_dx_rows(int dim, const float* x, const float* gamma, const float* mean,
                       const float* rstd, const float* dy, float* dx, float* dgamma, float* dbeta,
                       size_t r0, size_t r1) {
  widest_build([=](auto) LS_BUILD_LAMBDA {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      const float* dyr = dy + r * dim;
      float* dxr = dx + r * dim;
      const float m = mean[r], rs = rstd[r];
      // sum_j g and sum_j g * xhat
      const double g_sum =
          lane_sum(dim, [&](int j) { return static_cast<double>(dyr[j] * gamma[j]); });
      const double gx_sum = lane_sum(dim, [&](int j) {
        const float xhat = (xr[j] - m) * rs;
        const float g = dyr[j] * gamma[j];
        return static_cast<double>(g) * xhat;
      });
      const float g_mean = static_cast<float>(g_sum / dim);
      const float gx_mean = static_cast<float>(gx_sum / dim);
      for (int j = 0; j < dim; ++j) {
        const float xhat = (xr[j] - m) * rs;
        dxr[j] = rs * (dyr[j] * gamma[j] - g_mean - xhat * gx_mean);
      }
      // The row is in L1 now: the parameters' terms cost no second read of x and dy.
      if (dgamma != nullptr)
        for (int j = 0; j < dim; ++j) dgamma[j] += dyr[j] * ((xr[j] - m) * rs);
      if (dbeta != nullptr)
        for (int j = 0; j < dim; ++j) dbeta[j] += dyr[j];
    }
  });
}

// dgamma and dbeta for the `width` columns from j0: each column adds its rows in order to the value
// it had. Blocks of kColumns are compiled for that width, so the sums stay in registers.
template <int kWidth>
LS_ALWAYS_INLINE void column_block(const LayerNormShape& s, int j0, int width, const float* x,
                                   const float* mean, const float* rstd, const float* dy,
                                   float* dgamma, float* dbeta) {
  const int n = kWidth > 0 ? kWidth : width;
  float g[kColumns], be[kColumns];
  for (int l = 0; l < n; ++l) {
    g[l] = dgamma != nullptr ? dgamma[j0 + l] : 0.0f;
    be[l] = dbeta != nullptr ? dbeta[j0 + l] : 0.0f;
  }
  for (int r = 0; r < s.rows; ++r) {
    const size_t off = static_cast<size_t>(r) * s.dim + j0;
    const float m = mean[r], rs = rstd[r];
    for (int l = 0; l < n; ++l) {
      g[l] += dy[off + l] * ((x[off + l] - m) * rs);
      be[l] += dy[off + l];
    }
  }
  for (int l = 0; l < n; ++l) {
    if (dgamma != nullptr) dgamma[j0 + l] = g[l];
    if (dbeta != nullptr) dbeta[j0 + l] = be[l];
  }
}

// Column blocks [b0, b1) of kColumns (the last one may be narrower).
void layernorm_column_sums(const LayerNormShape& s, const float* x, const float* mean,
                           const float* rstd, const float* dy, float* dgamma, float* dbeta,
                           size_t b0, size_t b1) {
  widest_build([=](auto) LS_BUILD_LAMBDA {
    for (size_t b = b0; b < b1; ++b) {
      const int j0 = static_cast<int>(b) * kColumns, width = std::min(kColumns, s.dim - j0);
      if (width == kColumns)
        column_block<kColumns>(s, j0, width, x, mean, rstd, dy, dgamma, dbeta);
      else
        column_block<0>(s, j0, width, x, mean, rstd, dy, dgamma, dbeta);
    }
  });
}

}  // namespace

void layernorm_forward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                           const float* beta, float* y, float* mean, float* rstd) {
  check_layernorm_shape(s, "layernorm_forward_cpu");
  parallel_chunks(static_cast<size_t>(s.rows), kRowGrain, [&](size_t r0, size_t r1) {
    layernorm_forward_rows(s.dim, x, gamma, beta, y, mean, rstd, r0, r1);
  });
}

void layernorm_backward_cpu(const LayerNormShape& s, const float* x, const float* gamma,
                            const float* mean, const float* rstd, const float* dy, float* dx,
                            float* dgamma, float* dbeta) {
  check_layernorm_shape(s, "layernorm_backward_cpu");
  const size_t rows = static_cast<size_t>(s.rows);
  // On one thread (a lane's, or --threads 1) dx and the parameters' sums in one pass over the
  // rows; on several, dx row by row, then dgamma and dbeta column by column. Either way each column
  // sums its rows in order: the same bits at any thread count.
  if (dx != nullptr && parallel_chunk_count(rows, kRowGrain) == 1) {
    layernorm_dx_rows(s.dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, 0, rows);
    return;
  }
  if (dx != nullptr)
    parallel_chunks(rows, kRowGrain, [&](size_t r0, size_t r1) {
      layernorm_dx_rows(s.dim, x, gamma, mean, rstd, dy, dx, nullptr, nullptr, r0, r1);
    });
  if (dgamma == nullptr && dbeta == nullptr) return;
  const size_t blocks = static_cast<size_t>(s.dim + kColumns - 1) / kColumns;
  parallel_chunks(blocks, 1, [&](size_t b0, size_t b1) {
    layernorm_column_sums(s, x, mean, rstd, dy, dgamma, dbeta, b0, b1);
  });
}

}  // namespace lockstep::kernels
