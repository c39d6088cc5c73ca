#include "kernels/pool.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

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

void maxpool_forward_cpu(const PoolShape& s, const float* x, float* y, int32_t* argmax) {
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

}  // namespace

void maxpool_forward_blocked16_cpu(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                                   bool y_blocked16) {
  require_blocks_of_16(s, "maxpool_forward_blocked16_cpu");
  const int oh = s.out_h(), ow = s.out_w(), c = s.c, blocks = s.c / 16;
  // 16, but not a constant to the compiler: g++ unrolls a constant 16-trip loop into scalar code
  // before it would vectorise it (3x slower, 2026-11-26).
  const int lanes = c / blocks;
  LS_PARALLEL_FOR
  for (int img = 0; img < s.n; ++img) {
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        for (int cb = 0; cb < blocks; ++cb) {
          // One block's 16 channels are contiguous in the input and in either output layout; the
          // window is visited tap by tap in the NHWC kernel's order, so ties resolve alike.
          const size_t out =
              y_blocked16 ? (((static_cast<size_t>(img) * blocks + cb) * oh + oy) * ow + ox) * lanes
                          : ((static_cast<size_t>(img) * oh + oy) * ow + ox) * c + cb * lanes;
          float* __restrict yo = y + out;
          int32_t* __restrict ao = argmax + out;
          for (int ky = 0; ky < s.k; ++ky) {
            for (int kx = 0; kx < s.k; ++kx) {
              const int32_t base = static_cast<int32_t>(
                  (((img * blocks + cb) * s.h + oy * s.k + ky) * s.w + ox * s.k + kx) * lanes);
              const float* __restrict src = x + base;
              if (ky == 0 && kx == 0) {
                for (int ch = 0; ch < lanes; ++ch) {
                  yo[ch] = src[ch];
                  ao[ch] = base + ch;
                }
                continue;
              }
              for (int ch = 0; ch < lanes; ++ch) {
                const float v = src[ch], cur = yo[ch];
                const int32_t take = -static_cast<int32_t>(v > cur);
                yo[ch] = v > cur ? v : cur;
                ao[ch] = ((base + ch) & take) | (ao[ch] & ~take);
              }
            }
          }
        }
      }
    }
  }
}

void maxpool_backward_blocked16_cpu(const PoolShape& s, const float* dy, const int32_t* argmax,
                                    float* dx) {
  require_blocks_of_16(s, "maxpool_backward_blocked16_cpu");
  // An image's slice is the same size in either layout, and its argmax points into it.
  maxpool_backward_cpu(s, dy, argmax, dx);
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
    for (size_t i = first; i < first + out_image; ++i) dx[argmax[i]] += dy[i];
  }
}

}  // namespace lockstep::kernels
