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

// Matching PyTorch's initialisation keeps published recipes comparable.
void init_weights_and_bias(float* params, size_t weights, size_t bias, size_t fan_in,
                           std::mt19937_64& gen) {
  float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  fill_uniform(params, weights, bound, gen);
  fill_uniform(params + weights, bias, bound, gen);
}

bool layers_available(DeviceKind kind) { return kind == DeviceKind::cpu || cuda_built(); }

}  // namespace lockstep
