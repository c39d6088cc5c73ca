#include "kernels/conv/pool.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/lanes16.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {

size_t maxpool_input_elements(const PoolShape& s, const char* who) {
  if (s.n < 0 || s.h <= 0 || s.w <= 0 || s.c <= 0 || s.k <= 0 || s.k > s.h || s.k > s.w)
    throw std::invalid_argument(std::string(who) +
                                ": n must be >= 0, h, w, c > 0 and 0 < k <= min(h, w)");
  const size_t elems = static_cast<size_t>(s.n) * s.h * s.w * s.c;
  // argmax holds flat input indices as int32.
  if (elems > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument(std::string(who) + ": input larger than 2^31 elements");
  return elems;
}

void maxpool_forward_cpu(const PoolShape& s, const float* x, float* y, int32_t* argmax, bool relu) {
  maxpool_input_elements(s, "maxpool_forward_cpu");
  const int oh = s.out_h(), ow = s.out_w(), c = s.c;
  // One image per iteration, spread over the threads (parallel.h).
  LS_PARALLEL_FOR
  for (int img = 0; img < s.n; ++img) {
    const size_t first = static_cast<size_t>(img) * oh * ow * c;
    float* __restrict yo = y + first;
    int32_t* __restrict ao = argmax + first;
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox, yo += c, ao += c) {
        // The window is visited tap by tap with the channels innermost (contiguous in NHWC), so the
        // compare-and-select runs over c lanes at once.
        for (int ky = 0; ky < s.k; ++ky) {
          for (int kx = 0; kx < s.k; ++kx) {
            const int32_t base =
                static_cast<int32_t>(((img * s.h + oy * s.k + ky) * s.w + ox * s.k + kx) * c);
            const float* __restrict src = x + base;
            if (ky == 0 && kx == 0) {
              for (int ch = 0; ch < c; ++ch) {
                yo[ch] = src[ch];
                ao[ch] = base + ch;
              }
              continue;
            }
            // Strictly greater: the first maximum of the window wins a tie. The index is chosen
            // with a bit mask, not a ?: on the comparison, which g++ will not vectorise.
            for (int ch = 0; ch < c; ++ch) {
              const float v = src[ch], cur = yo[ch];
              const int32_t take = -static_cast<int32_t>(v > cur);
              yo[ch] = v > cur ? v : cur;
              ao[ch] = ((base + ch) & take) | (ao[ch] & ~take);
            }
          }
        }
        if (relu)
          for (int ch = 0; ch < c; ++ch) {
            const int32_t positive = -static_cast<int32_t>(yo[ch] > 0.0f);
            ao[ch] = (ao[ch] & positive) | ~positive;  // -1 where the ReLU gives 0
            yo[ch] = yo[ch] < 0.0f ? 0.0f : yo[ch];    // as relu_forward_cpu: a NaN passes
          }
      }
    }
  }
}

namespace {

// The blocked pair's shape check: the NHWC one, and whole blocks of 16 channels.
void require_blocks_of_16(const PoolShape& s, const char* who) {
  maxpool_input_elements(s, who);
  if (s.c % 16 != 0)
    throw std::invalid_argument(std::string(who) + ": channels (" + std::to_string(s.c) +
                                ") must be a multiple of 16");
}

// The blocked pair works a plane (image, block of 16 channels) at a time, an output position's 16
// lanes in vectors (lanes16.h): AVX-512 when the CPU has it (0.35 against 0.78 ms for the CNN's
// first max-pool at batch 64 with plain 16-lane loops), else the baseline build.
using lanes16::Lanes;
using lanes16::OutIndex;

// Forward over planes [p0, p1): each window visited tap by tap in the NHWC kernel's order, the
// first maximum winning a tie, argmax the flat index into the blocked x (-1 where a fused ReLU
// gives 0).
template <int W>
LS_ALWAYS_INLINE void forward_planes(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                                     OutIndex at, bool relu, size_t p0, size_t p1) {
  using L = Lanes<W>;
  using F = typename L::F;
  using I = typename L::I;
  I iota;
  for (int l = 0; l < W; ++l) iota[l] = l;
  for (size_t p = p0; p < p1; ++p) {
    const size_t img = p / at.blocks;
    const int cb = static_cast<int>(p % at.blocks);
    for (int oy = 0; oy < at.oh; ++oy) {
      for (int ox = 0; ox < at.ow; ++ox) {
        const auto first = static_cast<int32_t>(((p * s.h + oy * s.k) * s.w + ox * s.k) * 16);
        F best[L::kGroups];
        I arg[L::kGroups];
        for (int g = 0; g < L::kGroups; ++g) {
          std::memcpy(&best[g], x + first + g * W, sizeof(F));
          arg[g] = first + g * W + iota;
        }
        for (int ky = 0; ky < s.k; ++ky) {
          for (int kx = 0; kx < s.k; ++kx) {
            if (ky == 0 && kx == 0) continue;
            const int32_t tap = first + (ky * s.w + kx) * 16;
            for (int g = 0; g < L::kGroups; ++g) {
              F v;
              std::memcpy(&v, x + tap + g * W, sizeof(F));
              const I more = v > best[g];  // strictly: the first maximum keeps a tie
              best[g] = more ? v : best[g];
              arg[g] = more ? tap + g * W + iota : arg[g];
            }
          }
        }
        if (relu) {
          const F zero = {};
          for (int g = 0; g < L::kGroups; ++g) {
            const I positive = best[g] > zero;
            arg[g] = positive ? arg[g] : -1;
            best[g] = best[g] < zero ? zero : best[g];  // as relu_forward_cpu: a NaN passes
          }
        }
        const size_t o = at(img, cb, oy, ox);
        std::memcpy(y + o, best, sizeof(best));
        std::memcpy(argmax + o, arg, sizeof(arg));
      }
    }
  }
}

// Backward over planes [p0, p1): every element of dx written once, dy where the window's argmax
// points and 0 elsewhere (windows do not overlap), the rows and columns no window covers zeroed:
// the scatter's values, in one pass without zeroing dx first.
template <int W>
LS_ALWAYS_INLINE void backward_planes(const PoolShape& s, const float* dy, const int32_t* argmax,
                                      float* dx, OutIndex at, size_t p0, size_t p1) {
  using L = Lanes<W>;
  using F = typename L::F;
  using I = typename L::I;
  I iota;
  for (int l = 0; l < W; ++l) iota[l] = l;
  const F zero = {};
  const size_t row = static_cast<size_t>(s.w) * 16;
  for (size_t p = p0; p < p1; ++p) {
    const size_t img = p / at.blocks;
    const int cb = static_cast<int>(p % at.blocks);
    float* plane = dx + p * s.h * row;
    for (int oy = 0; oy < at.oh; ++oy) {
      for (int ox = 0; ox < at.ow; ++ox) {
        const size_t o = at(img, cb, oy, ox);
        F g_dy[L::kGroups];
        I arg[L::kGroups];
        std::memcpy(g_dy, dy + o, sizeof(g_dy));
        std::memcpy(arg, argmax + o, sizeof(arg));
        const auto first = static_cast<int32_t>(((p * s.h + oy * s.k) * s.w + ox * s.k) * 16);
        for (int ky = 0; ky < s.k; ++ky) {
          for (int kx = 0; kx < s.k; ++kx) {
            const int32_t tap = first + (ky * s.w + kx) * 16;
            for (int g = 0; g < L::kGroups; ++g) {
              const F v = arg[g] == tap + g * W + iota ? g_dy[g] : zero;
              std::memcpy(dx + tap + g * W, &v, sizeof(F));
            }
          }
        }
      }
      // Columns right of the last window.
      for (int ky = 0; ky < s.k; ++ky)
        std::fill(plane + (oy * s.k + ky) * row + at.ow * s.k * 16,
                  plane + (oy * s.k + ky + 1) * row, 0.0f);
    }
    // Rows below the last window.
    std::fill(plane + at.oh * s.k * row, plane + s.h * row, 0.0f);
  }
}

LS_AVX512 void forward_planes_avx512(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                                     OutIndex at, bool relu, size_t p0, size_t p1) {
  forward_planes<16>(s, x, y, argmax, at, relu, p0, p1);
}
void forward_planes_sse(const PoolShape& s, const float* x, float* y, int32_t* argmax, OutIndex at,
                        bool relu, size_t p0, size_t p1) {
  forward_planes<4>(s, x, y, argmax, at, relu, p0, p1);
}
LS_AVX512 void backward_planes_avx512(const PoolShape& s, const float* dy, const int32_t* argmax,
                                      float* dx, OutIndex at, size_t p0, size_t p1) {
  backward_planes<16>(s, dy, argmax, dx, at, p0, p1);
}
void backward_planes_sse(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx,
                         OutIndex at, size_t p0, size_t p1) {
  backward_planes<4>(s, dy, argmax, dx, at, p0, p1);
}

OutIndex out_index(const PoolShape& s, bool y_blocked16) {
  return {s.out_h(), s.out_w(), s.c / 16, s.c, y_blocked16};
}

}  // namespace

void maxpool_forward_blocked16_cpu(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                                   bool y_blocked16, bool relu) {
  require_blocks_of_16(s, "maxpool_forward_blocked16_cpu");
  const OutIndex at = out_index(s, y_blocked16);
  const bool wide = cpu_avx512f();
  parallel_chunks(static_cast<size_t>(s.n) * at.blocks, 1, [&](size_t b, size_t e) {
    if (wide)
      forward_planes_avx512(s, x, y, argmax, at, relu, b, e);
    else
      forward_planes_sse(s, x, y, argmax, at, relu, b, e);
  });
}

void maxpool_backward_blocked16_cpu(const PoolShape& s, const float* dy, const int32_t* argmax,
                                    float* dx, bool dy_blocked16) {
  require_blocks_of_16(s, "maxpool_backward_blocked16_cpu");
  const OutIndex at = out_index(s, dy_blocked16);
  const bool wide = cpu_avx512f();
  parallel_chunks(static_cast<size_t>(s.n) * at.blocks, 1, [&](size_t b, size_t e) {
    if (wide)
      backward_planes_avx512(s, dy, argmax, dx, at, b, e);
    else
      backward_planes_sse(s, dy, argmax, dx, at, b, e);
  });
}

void maxpool_backward_cpu(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx) {
  maxpool_input_elements(s, "maxpool_backward_cpu");
  const size_t in_image = static_cast<size_t>(s.h) * s.w * s.c;
  const size_t out_image = static_cast<size_t>(s.out_h()) * s.out_w() * s.c;
  // One image per iteration, spread over the threads: its slice of dx is zeroed, then its outputs
  // scattered, and an image's argmax (as the forward pass wrote it) points into its own slice only.
  // Windows do not overlap (stride k), so each element of dx takes at most one dy: the same bits
  // at any thread count.
  LS_PARALLEL_FOR
  for (int img = 0; img < s.n; ++img) {
    std::fill_n(dx + img * in_image, in_image, 0.0f);
    const size_t first = img * out_image;
    for (size_t i = first; i < first + out_image; ++i)
      if (argmax[i] >= 0) dx[argmax[i]] += dy[i];
  }
}

}  // namespace lockstep::kernels
