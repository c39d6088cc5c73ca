#include "kernels/conv/conv_pool.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/lanes16.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {

namespace {

using lanes16::Lanes;
using lanes16::OutIndex;

void check(const ConvPoolShape& s, const char* who) {
  conv2d_geometry(s.conv, who);
  if (!conv_pool_supported(s.conv, s.k))
    throw std::invalid_argument(
        std::string(who) +
        ": needs one input channel, stride 1, an odd square kernel with padding K/2, output "
        "channels a multiple of 16 and a pool window no larger than the image");
}

// One image's input, zero-padded by K/2 on every side: the taps then need no bounds checks. The
// buffer is the calling thread's, kept between calls (no allocation a step once it has grown).
struct Padded {
  int pad, h, w;  // the padded size
  std::vector<float>& v;
  explicit Padded(const Conv2dShape& c)
      : pad(c.kh / 2), h(c.h + 2 * pad), w(c.w + 2 * pad), v(buffer()) {
    v.assign(static_cast<size_t>(h) * w, 0.0f);
  }
  static std::vector<float>& buffer() {
    thread_local std::vector<float> b;
    return b;
  }
  const float* load(const float* image, const Conv2dShape& c) {
    for (int y = 0; y < c.h; ++y)
      std::memcpy(v.data() + static_cast<size_t>(y + pad) * w + pad,
                  image + static_cast<size_t>(y) * c.w, sizeof(float) * c.w);
    return v.data();
  }
};

// An output position's W window indices (int32 lanes, -1 to 120) as W bytes at `out`: AVX-512's
// conversion is one instruction, GCC's for 8 lanes a scalar loop, so there each lane's low byte
// is picked by a shuffle instead (the same values).
template <int W, class I>
LS_ALWAYS_INLINE void store_bytes(int8_t* out, const I& v) {
  typedef int8_t Narrow __attribute__((vector_size(W)));
  const Narrow n = __builtin_convertvector(v, Narrow);
  std::memcpy(out, &n, sizeof(n));
}
template <>
LS_ALWAYS_INLINE void store_bytes<8>(int8_t* out, const Lanes<8>::I& v) {
  typedef int8_t Wide __attribute__((vector_size(32)));
  typedef int8_t Narrow __attribute__((vector_size(8)));
  Wide b;
  std::memcpy(&b, &v, sizeof(b));
  const Narrow n = __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28);
  std::memcpy(out, &n, sizeof(n));
}

// A window's maximum of its `window` convolution outputs sums[q * stride] + bias and the position q
// it came from, strictly (the first maximum keeps a tie); with the fused ReLU, 0 and position -1
// where that maximum is not above 0 (as relu_forward_cpu: a NaN passes).
template <class F, class I>
LS_ALWAYS_INLINE void window_max(int window, const F& bias, bool relu, const F* sums, int stride,
                                 F& best, I& arg) {
  best = sums[0] + bias;
  arg = I{};
  for (int q = 1; q < window; ++q) {
    const F out = sums[q * stride] + bias;
    const I more = out > best;
    best = more ? out : best;
    arg = more ? I{} + q : arg;
  }
  if (relu) {
    const F zero = {};
    arg = best > zero ? arg : I{} - 1;
    best = best < zero ? zero : best;
  }
}

// A pooled output's W lanes of gradient at o and their window positions (argmax's bytes widened),
// the gradient zero where the fused ReLU cut the window.
template <int W, class F, class I>
LS_ALWAYS_INLINE void pooled_gradient(const float* dy, const int8_t* argmax, size_t o, F& g_dy,
                                      I& arg) {
  std::memcpy(&g_dy, dy + o, sizeof(g_dy));
  int32_t widened[W];
  for (int l = 0; l < W; ++l) widened[l] = argmax[o + l];
  std::memcpy(&arg, widened, sizeof(arg));
  g_dy = arg >= 0 ? g_dy : F{};
}

// Images [i0, i1) forward. KT / PK: the kernel size / pool window when known at compile time
// (3 / 2), else 0 and s.conv.kh / s.k.
template <int W, int KT, int PK>
LS_ALWAYS_INLINE void forward_images(const ConvPoolShape& s, const float* x, const float* w,
                                     const float* b, float* y, int8_t* argmax, size_t i0,
                                     size_t i1) {
  using L = Lanes<W>;
  using F = typename L::F;
  using I = typename L::I;
  constexpr int G = L::kGroups;
  const Conv2dShape& c = s.conv;
  const int K = KT > 0 ? KT : c.kh, k = PK > 0 ? PK : s.k, window = k * k, oh = s.out_h(),
            ow = s.out_w(), cout = c.c_out;
  constexpr int kMaxWindow = PK > 0 ? PK * PK : 121;  // conv_pool_supported: k <= 11
  const OutIndex at{oh, ow, cout / 16, cout, s.y_blocked16};
  Padded pad(c);
  for (size_t img = i0; img < i1; ++img) {
    const float* p = pad.load(x + img * c.h * c.w, c);
    for (int cb = 0; cb < at.blocks; ++cb) {
      F bias[G];
      std::memcpy(bias, b + cb * 16, sizeof(bias));
      // The block's weights, held locally (in registers for a 3x3 kernel) when K is known.
      constexpr int kHeld = KT > 0 ? KT * KT : 1;
      F held[kHeld][G];
      if constexpr (KT > 0)
        for (int t = 0; t < kHeld; ++t)
          std::memcpy(held[t], w + static_cast<size_t>(t) * cout + cb * 16, sizeof(held[t]));
      for (int py = 0; py < oh; ++py) {
        for (int px = 0; px < ow; ++px) {
          // The convolution's outputs at the window's k*k positions, 16 channels each, summed
          // side by side (independent chains); per output the taps in order, then the bias: the
          // im2col product's order (and, with FMA, its bits), so near-ties in a window resolve
          // as in the unfused layers.
          F acc[kMaxWindow][G] = {};
          const float* corner = p + static_cast<size_t>(py * k) * pad.w + px * k;
          for (int ky = 0; ky < K; ++ky) {
            for (int kx = 0; kx < K; ++kx) {
              F wv[G];
              if constexpr (KT > 0)
                for (int g = 0; g < G; ++g) wv[g] = held[ky * K + kx][g];
              else
                std::memcpy(wv, w + static_cast<size_t>(ky * K + kx) * cout + cb * 16, sizeof(wv));
              for (int wy = 0; wy < k; ++wy)
                for (int wx = 0; wx < k; ++wx) {
                  const float v = corner[(wy + ky) * pad.w + wx + kx];
                  for (int g = 0; g < G; ++g) acc[wy * k + wx][g] += v * wv[g];
                }
            }
          }
          F best[G];
          I arg[G];
          for (int g = 0; g < G; ++g)
            window_max(window, bias[g], s.relu, &acc[0][g], G, best[g], arg[g]);
          const size_t o = at(img, cb, py, px);
          std::memcpy(y + o, best, sizeof(best));
          for (int g = 0; g < G; ++g) store_bytes<W>(argmax + o + g * W, arg[g]);
        }
      }
    }
  }
}

// Images [i0, i1) backward: each image's weight and bias gradients into its own slice of
// `partial` ((K*K + 1) * c_out floats: the K*K taps, then the bias).
template <int W, int KT>
LS_ALWAYS_INLINE void backward_images(const ConvPoolShape& s, const float* x, const float* dy,
                                      const int8_t* argmax, float* partial, size_t i0, size_t i1) {
  using L = Lanes<W>;
  using F = typename L::F;
  using I = typename L::I;
  constexpr int G = L::kGroups;
  constexpr int kMaxTaps = KT > 0 ? KT * KT : 49;
  const Conv2dShape& c = s.conv;
  const int K = KT > 0 ? KT : c.kh, taps = K * K, k = s.k, oh = s.out_h(), ow = s.out_w(),
            cout = c.c_out;
  const OutIndex at{oh, ow, cout / 16, cout, s.y_blocked16};
  Padded pad(c);
  for (size_t img = i0; img < i1; ++img) {
    const float* p = pad.load(x + img * c.h * c.w, c);
    float* mine = partial + img * static_cast<size_t>(taps + 1) * cout;
    // One vector of W lanes of a 16-channel block at a time over the whole image: the taps'
    // accumulators stay in a 16-register ISA's registers (AVX2: both halves at once spilled), and
    // each lane's sums run in the same order either way.
    for (int cb = 0; cb < at.blocks; ++cb) {
      for (int g = 0; g < G; ++g) {
        const int lane0 = cb * 16 + g * W;
        F acc[kMaxTaps] = {};
        F acc_b = {};
        for (int py = 0; py < oh; ++py) {
          for (int px = 0; px < ow; ++px) {
            const size_t o = at(img, cb, py, px) + g * W;
            F g_dy;
            I arg;
            pooled_gradient<W>(dy, argmax, o, g_dy, arg);
            acc_b += g_dy;
            const F zero = {};
            for (int wy = 0; wy < k; ++wy) {
              for (int wx = 0; wx < k; ++wx) {
                const int32_t pos = wy * k + wx;
                const F masked = arg == pos ? g_dy : zero;
                const float* row = p + static_cast<size_t>(py * k + wy) * pad.w + px * k + wx;
                for (int ky = 0; ky < K; ++ky)
                  for (int kx = 0; kx < K; ++kx) acc[ky * K + kx] += row[ky * pad.w + kx] * masked;
              }
            }
          }
        }
        for (int t = 0; t < taps; ++t)
          std::memcpy(mine + static_cast<size_t>(t) * cout + lane0, &acc[t], sizeof(F));
        std::memcpy(mine + static_cast<size_t>(taps) * cout + lane0, &acc_b, sizeof(F));
      }
    }
  }
}

// The CNN's shape (a 3x3 kernel, a 2x2 pool) in the AVX-512 and AVX2 builds. Forward: one vector
// of W lanes of a 16-channel block at a time over the whole image, so that its nine weights and
// the window's four sums stay in a 16-register ISA's registers (both halves at once spilled them,
// the window's maximum with them); per output the same sums in the same order as forward_images,
// so the same bits.
template <int W>
LS_ALWAYS_INLINE void forward_3x3_pool2(const ConvPoolShape& s, const float* x, const float* w,
                                        const float* b, float* y, int8_t* argmax, size_t i0,
                                        size_t i1) {
  using L = Lanes<W>;
  using F = typename L::F;
  using I = typename L::I;
  constexpr int G = L::kGroups;
  const Conv2dShape& c = s.conv;
  const int oh = s.out_h(), ow = s.out_w(), cout = c.c_out;
  const OutIndex at{oh, ow, cout / 16, cout, s.y_blocked16};
  Padded pad(c);
  for (size_t img = i0; img < i1; ++img) {
    const float* p = pad.load(x + img * c.h * c.w, c);
    for (int cb = 0; cb < at.blocks; ++cb) {
      for (int g = 0; g < G; ++g) {
        const int lane0 = cb * 16 + g * W;
        F wt[9], bias;
        for (int t = 0; t < 9; ++t)
          std::memcpy(&wt[t], w + static_cast<size_t>(t) * cout + lane0, sizeof(F));
        std::memcpy(&bias, b + lane0, sizeof(F));
        // Pixel px's window: its maximum (and the ReLU) stored.
        const auto finish = [&](int py, int px, const F* acc) {
          F best;
          I arg;
          window_max(4, bias, s.relu, acc, 1, best, arg);
          const size_t o = at(img, cb, py, px) + g * W;
          std::memcpy(y + o, &best, sizeof(best));
          store_bytes<W>(argmax + o, arg);
        };
        for (int py = 0; py < oh; ++py) {
          for (int px = 0; px < ow; ++px) {
            // The window's 4x4 input patch value by value, each added to the sums that take it:
            // 16 loads for 36 products, and each sum still gets its taps in order (ky, kx).
            const float* corner = p + static_cast<size_t>(py * 2) * pad.w + px * 2;
            F acc[4] = {};
            for (int r = 0; r < 4; ++r)
              for (int cc = 0; cc < 4; ++cc) {
                const float v = corner[r * pad.w + cc];
                for (int q = 0; q < 4; ++q) {
                  const int ky = r - q / 2, kx = cc - q % 2;
                  if (ky >= 0 && ky < 3 && kx >= 0 && kx < 3) acc[q] += v * wt[ky * 3 + kx];
                }
              }
            finish(py, px, acc);
          }
        }
      }
    }
  }
}

// Backward: a pooled output's gradient reaches one of its window's four positions per lane, so
// each tap adds one product per lane, of the input at that lane's position, picked from the
// window's 4x4 input patch by a permute (AVX2: rows ky and ky + 1 in one 8-lane register; AVX-512:
// the whole patch in one): 9 products where masking every position computed 36. Each lane's sums
// get the same products in the same order (the 27 left out added zeros), so the same bits.
template <int W>
LS_ALWAYS_INLINE void backward_3x3_pool2(const ConvPoolShape& s, const float* x, const float* dy,
                                         const int8_t* argmax, float* partial, size_t i0,
                                         size_t i1) {
  static_assert(W == 8 || W == 16, "a patch's rows in one register");
  using L = Lanes<W>;
  using F = typename L::F;
  using I = typename L::I;
  typedef float F4 __attribute__((vector_size(16)));
  constexpr int G = L::kGroups;
  const Conv2dShape& c = s.conv;
  const int oh = s.out_h(), ow = s.out_w(), cout = c.c_out;
  const OutIndex at{oh, ow, cout / 16, cout, s.y_blocked16};
  Padded pad(c);
  for (size_t img = i0; img < i1; ++img) {
    const float* p = pad.load(x + img * c.h * c.w, c);
    float* mine = partial + img * static_cast<size_t>(10) * cout;
    for (int cb = 0; cb < at.blocks; ++cb) {
      for (int g = 0; g < G; ++g) {
        const int lane0 = cb * 16 + g * W;
        F acc[9] = {};
        F acc_b = {};
        for (int py = 0; py < oh; ++py) {
          for (int px = 0; px < ow; ++px) {
            const size_t o = at(img, cb, py, px) + g * W;
            F g_dy;
            I arg;
            pooled_gradient<W>(dy, argmax, o, g_dy, arg);
            acc_b += g_dy;
            // Window position wy * 2 + wx as its offset in the patch's 4-wide rows, wy * 4 + wx
            // (a cut window's lanes pick any value: their gradient is zero).
            const I off = arg + (arg & 2);
            const float* corner = p + static_cast<size_t>(py * 2) * pad.w + px * 2;
            F4 r[4];
            for (int i = 0; i < 4; ++i) std::memcpy(&r[i], corner + i * pad.w, sizeof(F4));
            if constexpr (W == 8) {
              for (int ky = 0; ky < 3; ++ky) {
                const F rows = __builtin_shufflevector(r[ky], r[ky + 1], 0, 1, 2, 3, 4, 5, 6, 7);
                for (int kx = 0; kx < 3; ++kx)
                  acc[ky * 3 + kx] += __builtin_shuffle(rows, off + kx) * g_dy;
              }
            } else {
              const F patch = __builtin_shufflevector(
                  __builtin_shufflevector(r[0], r[1], 0, 1, 2, 3, 4, 5, 6, 7),
                  __builtin_shufflevector(r[2], r[3], 0, 1, 2, 3, 4, 5, 6, 7), 0, 1, 2, 3, 4, 5, 6,
                  7, 8, 9, 10, 11, 12, 13, 14, 15);
              for (int ky = 0; ky < 3; ++ky)
                for (int kx = 0; kx < 3; ++kx)
                  acc[ky * 3 + kx] += __builtin_shuffle(patch, off + (ky * 4 + kx)) * g_dy;
            }
          }
        }
        for (int t = 0; t < 9; ++t)
          std::memcpy(mine + static_cast<size_t>(t) * cout + lane0, &acc[t], sizeof(F));
        std::memcpy(mine + static_cast<size_t>(9) * cout + lane0, &acc_b, sizeof(F));
      }
    }
  }
}

// The loops for a build of W floats a vector (widest_build, parallel.h: AVX-512, AVX2 with FMA,
// baseline), with the kernel size 3 unrolled.
template <int W>
LS_ALWAYS_INLINE void forward_w(const ConvPoolShape& s, const float* x, const float* w,
                                const float* b, float* y, int8_t* argmax, size_t i0, size_t i1) {
  if (s.conv.kh == 3 && s.k == 2 && W >= 8)
    forward_3x3_pool2<W>(s, x, w, b, y, argmax, i0, i1);
  else if (s.conv.kh == 3 && s.k == 2)
    forward_images<W, 3, 2>(s, x, w, b, y, argmax, i0, i1);
  else
    forward_images<W, 0, 0>(s, x, w, b, y, argmax, i0, i1);
}
template <int W>
LS_ALWAYS_INLINE void backward_w(const ConvPoolShape& s, const float* x, const float* dy,
                                 const int8_t* argmax, float* partial, size_t i0, size_t i1) {
  if constexpr (W >= 8)
    if (s.conv.kh == 3 && s.k == 2) return backward_3x3_pool2<W>(s, x, dy, argmax, partial, i0, i1);
  if (s.conv.kh == 3)
    backward_images<W, 3>(s, x, dy, argmax, partial, i0, i1);
  else
    backward_images<W, 0>(s, x, dy, argmax, partial, i0, i1);
}

}  // namespace

bool conv_pool_fast() { return cpu_avx512f() || cpu_avx2(); }

bool conv_pool_supported(const Conv2dShape& c, int k) {
  return c.c_in == 1 && c.stride == 1 && c.kh == c.kw && c.kh % 2 == 1 && c.kh <= 7 &&
         c.pad_h == c.kh / 2 && c.pad_w == c.kw / 2 && c.c_out > 0 && c.c_out % 16 == 0 &&
         !c.relu && k >= 1 && k <= 11 && k <= c.h && k <= c.w;
}

void conv_pool_forward_cpu(const ConvPoolShape& s, const float* x, const float* w, const float* b,
                           float* y, int8_t* argmax) {
  check(s, "conv_pool_forward_cpu");
  parallel_chunks(static_cast<size_t>(s.conv.n), 1, [&](size_t i0, size_t i1) {
    widest_build([&](auto width) LS_BUILD_LAMBDA {
      forward_w<decltype(width)::value>(s, x, w, b, y, argmax, i0, i1);
    });
  });
}

bool conv_pool_cuda_supported(const Conv2dShape& c, int k) {
  return conv_pool_supported(c, k) && c.kh * c.kw <= kConv2dDirectMaxTaps &&
         c.c_out <= kConv2dDirectMaxOut;
}

size_t conv_pool_cuda_workspace_floats(const ConvPoolShape& s) {
  const size_t rows = static_cast<size_t>(s.conv.n) * s.out_h() * s.out_w();
  const size_t blocks = std::clamp<size_t>((rows + 63) / 64, 1, 1024);
  return blocks * static_cast<size_t>(s.conv.kh * s.conv.kw + 1) * s.conv.c_out;
}

size_t conv_pool_scratch_floats(const ConvPoolShape& s) {
  return static_cast<size_t>(s.conv.n) * (s.conv.kh * s.conv.kw + 1) * s.conv.c_out;
}

void conv_pool_backward_cpu(const ConvPoolShape& s, const float* x, const float* dy,
                            const int8_t* argmax, float* dw, float* db, float* scratch) {
  check(s, "conv_pool_backward_cpu");
  parallel_chunks(static_cast<size_t>(s.conv.n), 1, [&](size_t i0, size_t i1) {
    widest_build([&](auto width) LS_BUILD_LAMBDA {
      backward_w<decltype(width)::value>(s, x, dy, argmax, scratch, i0, i1);
    });
  });
  // The images' partial sums in image order: the same bits at any thread count.
  const size_t taps = static_cast<size_t>(s.conv.kh) * s.conv.kw, cout = s.conv.c_out;
  const size_t per_image = (taps + 1) * cout;
  for (int img = 0; img < s.conv.n; ++img) {
    const float* part = scratch + img * per_image;
    for (size_t i = 0; i < taps * cout; ++i) dw[i] += part[i];
    if (db != nullptr)
      for (size_t j = 0; j < cout; ++j) db[j] += part[taps * cout + j];
  }
}

}  // namespace lockstep::kernels
