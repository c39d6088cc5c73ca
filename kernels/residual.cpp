#include "kernels/residual.h"

namespace lockstep::kernels {

// No __restrict: the header allows y == a or y == b; each element depends only on its own index.
void residual_add_cpu(const float* a, const float* b, float* y, size_t n) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void residual_accumulate_cpu(const float* src, float* dst, size_t n) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace lockstep::kernels
