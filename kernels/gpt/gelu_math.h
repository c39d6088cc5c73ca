// The GELU formula and its derivative, shared by gelu.cpp and gelu.cu so that both twins evaluate
// the same expression in the same order. Internal to the kernels (kernels/step/loss.cpp takes the
// host's exp_poly for the softmax's exponentials too).
//
// 0.5 x (1 + tanh(u)) is computed as x sigmoid(2u) = x / (1 + exp(-2u)), the same function: no
// cancellation in 1 + tanh(u) for negative u, and one exp instead of tanh. On the host, exp is
// exp_poly below, a branch-free polynomial (Cephes' expf: 2^n by exponent bits times a degree-6
// polynomial on [-ln2/2, ln2/2], within 2 ulp of expf) so that the loops vectorise, which libm's
// tanhf does not (docs/PERFORMANCE.md has what it cost). The device uses expf, clamped above as
// exp_poly is (below -87 expf's own result, 0 or a subnormal, is harmless).
// Pure inline functions: thread-safe, no collective calls.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define LS_HOST_DEVICE __host__ __device__
#else
#define LS_HOST_DEVICE
#endif
#define LS_GELU_INLINE inline __attribute__((always_inline))

namespace lockstep::kernels::gelu_math {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

// Each function takes a float, or on the host a GCC vector of floats (gelu.cpp's loops), lane by
// lane the same operations: the same bits either way.
template <class T>
using Bits = std::conditional_t<std::is_same_v<T, float>, int32_t, decltype(T{} < T{})>;

template <class T>
LS_HOST_DEVICE LS_GELU_INLINE T exp_poly(T x) {
#if defined(__CUDA_ARCH__)
  // The host's upper clamp: expf overflows to inf beyond 88.7 (x < -9.9 in exp_minus_2u), and
  // derivative's g * g * e is then 0 * inf = NaN where the function's slope is 0.
  return expf(fminf(x, 88.0f));
#else
  // Clamped by selects that vectorise (a branch here, on the constants it would give, made GCC
  // split the callers' paths: three divisions a value, and no vectors at all for AVX2).
  x = x < -87.0f ? T{} - 87.0f : x;
  x = x > 88.0f ? T{} + 88.0f : x;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (exact for |n| < 2^22); its low bits hold n.
  constexpr float kShift = 12582912.0f;
  const T t = x * 1.44269504088896341f + kShift;
  const T n = t - kShift;
  Bits<T> ti;
  int32_t si;
  std::memcpy(&ti, &t, sizeof ti);
  std::memcpy(&si, &kShift, sizeof si);
  const T r = x - n * 0.693359375f + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const Bits<T> bits = (ti - si + 127) << 23;  // 2^n
  T scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
#endif
}

// exp(-2u) for u = s (x + c x^3); 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e).
template <class T>
LS_HOST_DEVICE LS_GELU_INLINE T exp_minus_2u(T x) {
  return exp_poly(-2.0f * kSqrt2OverPi * (x + kCubic * x * x * x));
}

template <class T>
LS_HOST_DEVICE LS_GELU_INLINE T forward(T x) {
  return x / (1.0f + exp_minus_2u(x));
}

// d/dx of forward, with e = exp(-2u), g = 1 / (1 + e) and 1 - g = e g (no cancellation):
// g + 2 x g (1 - g) s (1 + 3 c x^2), the same as 0.5 (1 + th) + 0.5 x (1 - th^2) s (1 + 3 c x^2)
// with th = tanh(u).
template <class T>
LS_HOST_DEVICE LS_GELU_INLINE T derivative(T x) {
  const T e = exp_minus_2u(x);
  const T g = 1.0f / (1.0f + e);
  return g + 2.0f * x * (g * g * e) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
}

}  // namespace lockstep::kernels::gelu_math

#undef LS_HOST_DEVICE
#undef LS_GELU_INLINE
