// What the CPU kernels on 16-channel blocks share (not part of the kernels' API; only kernels/*.cpp
// include it): an output position's 16 lanes in GCC vectors of W floats, and where a position
// keeps its 16 lanes in a blocked or an NHWC output. W = 16 in a function built for AVX-512
// (LS_AVX512, parallel.h: one register), 8 for AVX2, 4 in the baseline build (SSE2); Lanes<W>::F
// serves any loop over vectors of W floats (gelu.cpp's too). GCC's vector types
// carry no alias checks and are not unrolled into scalar code, which plain 16-lane loops suffered.
// Types, unaligned loads and stores, and a pure index function: any thread may use them. No
// collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lockstep::kernels::lanes16 {

// A vector T (Lanes<W>::F) from, or to, floats at any alignment.
template <class T>
inline __attribute__((always_inline)) T load(const float* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline __attribute__((always_inline)) void store(float* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

template <int W>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
  static constexpr int kGroups = 16 / W;
};

// Output position (oy, ox) of image img, channel block cb: y[img][cb][oy][ox][16] when blocked,
// else y[img][oy][ox][c] from channel cb * 16.
struct OutIndex {
  int oh, ow, blocks, c;
  bool blocked;
  size_t operator()(size_t img, int cb, int oy, int ox) const {
    return blocked ? (((img * blocks + cb) * oh + oy) * ow + ox) * 16
                   : ((img * oh + oy) * ow + ox) * c + cb * 16;
  }
};

}  // namespace lockstep::kernels::lanes16
