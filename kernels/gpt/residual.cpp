#include "kernels/gpt/residual.h"

#include "kernels/parallel.h"

namespace lockstep::kernels {

// No __restrict: the header allows y == a or y == b; each element depends only on its own index.
constexpr size_t kGrain = 65536;  // elements per thread, at least: these loops are memory-bound

void residual_add_cpu(const float* a, const float* b, float* y, size_t n) {
  parallel_chunks(n, kGrain, [=](size_t begin, size_t end) {
#pragma GCC ivdep
    for (size_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
  });
}

void residual_accumulate_cpu(const float* src, float* dst, size_t n) {
  parallel_chunks(n, kGrain, [=](size_t begin, size_t end) {
#pragma GCC ivdep
    for (size_t i = begin; i < end; ++i) dst[i] += src[i];
  });
}

}  // namespace lockstep::kernels
