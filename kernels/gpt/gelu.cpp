#include "kernels/gpt/gelu.h"

#include "kernels/gpt/gelu_math.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {

// No __restrict: the header allows in-place use; each element depends only on its own index.
// Cloned for AVX-512 and AVX2 (parallel.h) beside the baseline build.

namespace {

constexpr size_t kGrain = 16384;  // elements per thread, at least

LS_VECTOR_CLONES void forward_span(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = gelu_math::forward(x[i]);
}

LS_VECTOR_CLONES void backward_span(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_math::derivative(x[i]);
}

}  // namespace

void gelu_forward_cpu(const float* x, float* y, size_t n) {
  parallel_chunks(n, kGrain, [=](size_t b, size_t e) { forward_span(x + b, y + b, e - b); });
}

void gelu_backward_cpu(const float* x, const float* dy, float* dx, size_t n) {
  parallel_chunks(n, kGrain,
                  [=](size_t b, size_t e) { backward_span(x + b, dy + b, dx + b, e - b); });
}

}  // namespace lockstep::kernels
