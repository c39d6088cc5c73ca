#include "kernels/step/optimizer.h"

#include <cmath>
#include <stdexcept>

#include "kernels/parallel.h"

namespace lockstep::kernels {

namespace {

// Elements a thread takes at least (parallel.h's parallel_chunks): the updates are elementwise, so
// the chunks change no bits; below this a second thread costs more than it saves.
constexpr size_t kGrain = 65536;

// SGD's loops over [begin, end): one call per thread's chunk.
void sgd_span(float* __restrict p, const float* __restrict g, float* __restrict v, size_t begin,
              size_t end, float lr, float mu, float wd, bool nesterov) {
  if (mu == 0.0f) {
    // Without momentum there is no state; a velocity buffer, if given, is left as it was.
    for (size_t i = begin; i < end; ++i) p[i] -= lr * (g[i] + wd * p[i]);
  } else if (nesterov) {
    for (size_t i = begin; i < end; ++i) {
      const float gi = g[i] + wd * p[i];
      v[i] = mu * v[i] + gi;
      p[i] -= lr * (gi + mu * v[i]);
    }
  } else {
    for (size_t i = begin; i < end; ++i) {
      v[i] = mu * v[i] + (g[i] + wd * p[i]);
      p[i] -= lr * v[i];
    }
  }
}

}  // namespace

void sgd_update_cpu(const SgdOptions& o, float* param, const float* grad, float* velocity,
                    size_t n) {
  if (o.momentum != 0.0f && velocity == nullptr)
    throw std::invalid_argument("sgd_update_cpu: momentum needs a velocity");
  parallel_chunks(n, kGrain, [&](size_t begin, size_t end) {
    sgd_span(param, grad, velocity, begin, end, o.lr, o.momentum, o.weight_decay, o.nesterov);
  });
}

namespace {

// The Adam loop over [begin, end), in the widest build the CPU allows (parallel.h's widest_build),
// one call per thread's chunk; vectorised whole because this file is built with -fno-math-errno
// (kernels/CMakeLists.txt: sqrt of a second moment never sets errno) and without FMA contraction:
// 0.13 -> 0.02 ms for the CNN's 50k parameters, the baseline build's bits (IEEE sqrt and
// division).
void adam_span(float* __restrict p, const float* __restrict g, float* __restrict mm,
               float* __restrict vv, size_t begin, size_t end, float b1, float b2, float eps,
               float coupled_wd, float shrink, float step_size, float inv_sqrt_bc2) {
  widest_build([=](auto) LS_BUILD_LAMBDA {
    for (size_t i = begin; i < end; ++i) {
      const float gi = g[i] + coupled_wd * p[i];
      mm[i] = b1 * mm[i] + (1.0f - b1) * gi;
      vv[i] = b2 * vv[i] + (1.0f - b2) * gi * gi;
      p[i] = p[i] * shrink - step_size * mm[i] / (std::sqrt(vv[i]) * inv_sqrt_bc2 + eps);
    }
  });
}

}  // namespace

UpdateCoefficients sgd_coefficients(const SgdOptions& o) {
  UpdateCoefficients c;
  c.mode = o.momentum == 0.0f ? 0 : o.nesterov ? 2 : 1;
  c.lr = o.lr;
  c.momentum = o.momentum;
  c.weight_decay = o.weight_decay;
  return c;
}

UpdateCoefficients adam_coefficients(const AdamOptions& o) {
  if (o.step < 1) throw std::invalid_argument("adam: step is 1-based");
  UpdateCoefficients c;
  c.mode = 3;
  c.b1 = o.beta1;
  c.b2 = o.beta2;
  c.eps = o.eps;
  // Bias corrections in double: beta2^step for step in the millions is still well resolved.
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(o.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(o.step));
  c.step_size = static_cast<float>(o.lr / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  // AdamW shrinks the parameter before the Adam step (as PyTorch does); Adam folds the decay into
  // the gradient instead, so it also feeds the moments.
  c.shrink = o.decoupled ? 1.0f - o.lr * o.weight_decay : 1.0f;
  c.coupled_wd = o.decoupled ? 0.0f : o.weight_decay;
  return c;
}

void adam_update_cpu(const AdamOptions& o, float* param, const float* grad, float* m, float* v,
                     size_t n) {
  if (o.step < 1) throw std::invalid_argument("adam_update_cpu: step is 1-based");
  const UpdateCoefficients c = adam_coefficients(o);
  // Over the rank's threads (the chunks are whole vector loops: parallel.h).
  parallel_chunks(n, kGrain, [&](size_t begin, size_t end) {
    adam_span(param, grad, m, v, begin, end, c.b1, c.b2, c.eps, c.coupled_wd, c.shrink, c.step_size,
              c.inv_sqrt_bc2);
  });
}

double global_norm_cpu(const float* g, size_t n) {
  // Four partial sums in double: accurate for millions of terms, and independent chains keep the
  // adds from serialising on one register.
  double acc[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) acc[j] += static_cast<double>(g[i + j]) * g[i + j];
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(g[i]) * g[i];
  return std::sqrt((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

void scale_cpu(float* x, size_t n, float s) {
  parallel_chunks(n, kGrain, [=](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) x[i] *= s;
  });
}

double clip_by_global_norm_cpu(float* g, size_t n, double max_norm) {
  const double norm = global_norm_cpu(g, n);
  if (max_norm > 0 && norm > max_norm) scale_cpu(g, n, static_cast<float>(max_norm / norm));
  return norm;
}

}  // namespace lockstep::kernels
