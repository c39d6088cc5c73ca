#include "kernels/gpt/gelu.h"

#include "kernels/gpt/gelu_math.h"
#include "kernels/lanes16.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {

// No __restrict: the header allows in-place use; each element depends only on its own index.
// Written with vectors of the build's width (parallel.h's widest_build), a lane per element, and
// the scalar formula for the last few: the same operations, the same bits, in every build.

namespace {

using lanes16::load;
using lanes16::store;

constexpr size_t kGrain = 16384;  // elements per thread, at least

template <int W>
using Lanes = typename lanes16::Lanes<W>::F;  // W floats

void forward_span(const float* x, float* y, size_t n) {
  widest_build([=](auto w) LS_BUILD_LAMBDA {
    size_t i = 0;
    for (; i + w <= n; i += w) store(y + i, gelu_math::forward(load<Lanes<w>>(x + i)));
    for (; i < n; ++i) y[i] = gelu_math::forward(x[i]);
  });
}

void backward_span(const float* x, const float* dy, float* dx, size_t n) {
  widest_build([=](auto w) LS_BUILD_LAMBDA {
    size_t i = 0;
    for (; i + w <= n; i += w)
      store(dx + i, load<Lanes<w>>(dy + i) * gelu_math::derivative(load<Lanes<w>>(x + i)));
    for (; i < n; ++i) dx[i] = dy[i] * gelu_math::derivative(x[i]);
  });
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
