#include "runtime/model/layers.h"

#include <cmath>

namespace lockstep {

void fill_uniform(float* p, size_t n, float bound, std::mt19937_64& gen) {
  constexpr float kScale = 1.0f / 16777216.0f;  // 2^-24
  for (size_t i = 0; i < n; ++i) {
    float u = static_cast<float>(gen() >> 40) * kScale;  // [0, 1)
    p[i] = (2.0f * u - 1.0f) * bound;
  }
}

void fill_normal(float* p, size_t n, float stddev, std::mt19937_64& gen) {
  constexpr double kScale = 1.0 / 16777216.0;  // 2^-24
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = static_cast<double>((gen() >> 40) + 1) * kScale;  // (0, 1]
    const double u2 = static_cast<double>(gen() >> 40) * kScale;        // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    p[i] = static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < n) p[i + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
  }
}

// Matching PyTorch's initialisation keeps published recipes comparable.
void init_weights_and_bias(float* params, size_t weights, size_t bias, size_t fan_in,
                           std::mt19937_64& gen) {
  float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  fill_uniform(params, weights, bound, gen);
  fill_uniform(params + weights, bias, bound, gen);
}

bool layers_available(DeviceKind kind) { return kind == DeviceKind::cpu || cuda_built(); }

}  // namespace lockstep
