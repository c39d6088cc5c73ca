#include "kernels/gelu.h"

#include "kernels/gelu_math.h"

namespace lockstep::kernels {

// No __restrict: the header allows in-place use; each element depends only on its own index.
// Cloned for AVX-512 and AVX2 (chosen at load time by the CPU) beside the baseline build.
#define LS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

LS_VECTOR_CLONES void gelu_forward_cpu(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = gelu_math::forward(x[i]);
}

LS_VECTOR_CLONES void gelu_backward_cpu(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_math::derivative(x[i]);
}

}  // namespace lockstep::kernels
