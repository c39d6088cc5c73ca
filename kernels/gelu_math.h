// The GELU formula and its derivative, shared by gelu.cpp and gelu.cu so that both twins evaluate
// the same expression in the same order (host and device). Internal to the twins.
// Pure inline functions: thread-safe, no collective calls.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define LS_HOST_DEVICE __host__ __device__
#else
#define LS_HOST_DEVICE
#endif

namespace lockstep::kernels::gelu_math {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

LS_HOST_DEVICE inline float forward(float x) {
  const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d/dx of forward: 0.5 (1 + th) + 0.5 x (1 - th^2) s (1 + 3 c x^2), th = tanh(s (x + c x^3)).
LS_HOST_DEVICE inline float derivative(float x) {
  const float x2 = x * x;
  const float th = tanhf(kSqrt2OverPi * (x + kCubic * x2 * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
}

}  // namespace lockstep::kernels::gelu_math

#undef LS_HOST_DEVICE
