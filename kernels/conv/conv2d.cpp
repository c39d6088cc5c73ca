#include "kernels/conv/conv2d.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/activation.h"
#include "kernels/gemm.h"

// Convolution as one gemm over the whole batch. Row m = (image, oy, ox) of the im2col matrix holds
// the receptive field of output pixel m in HWIO order (ky, kx, ci), so it lines up with the weight
// matrix w[kh * kw * c_in, c_out] and
//   y[M, c_out]  = col[M, K] . w[K, c_out]          M = n * out_h * out_w, K = kh * kw * c_in
//   dw[K, c_out] += col^T . dy                      dcol[M, K] = dy . w^T, then col2im into dx.
// Within one kernel row ky, the kx taps of a receptive field are neighbouring pixels of the same
// input row whatever the stride, so each (m, ky) is one contiguous run of x of (valid kx) * c_in
// floats plus zeros for the taps that fall into the padding: one copy, no per-channel work.

namespace lockstep::kernels {

namespace {

// The taps kx in [lo, hi) of a window starting at input column ix0 fall inside the image; with
// padding wider than the kernel a window may lie wholly outside it (lo == hi).
inline void valid_taps(int ix0, int kw, int w, int* lo, int* hi) {
  *lo = std::min(kw, std::max(0, -ix0));
  *hi = std::max(*lo, std::min(kw, w - ix0));
}

// Walks the rows of the im2col matrix in order, one run of kw * c_in entries per (m, ky), and calls
// visit(run, pixel, head, body): entries [head, head + body) of the run are the input floats that
// start at offset `pixel` of x; the others are padding. pixel < 0: the whole run is padding.
template <class Visit>
void for_each_run(const Conv2dShape& s, const Conv2dGeometry& g, Visit visit) {
  const ptrdiff_t image = static_cast<ptrdiff_t>(s.h) * s.w * s.c_in;
  size_t run = 0;
  for (int img = 0; img < s.n; ++img) {
    for (int oy = 0; oy < g.out_h; ++oy) {
      const int iy0 = oy * s.stride - s.pad_h;
      for (int ox = 0; ox < g.out_w; ++ox) {
        const int ix0 = ox * s.stride - s.pad_w;
        int lo, hi;
        valid_taps(ix0, s.kw, s.w, &lo, &hi);
        const int head = lo * s.c_in, body = (hi - lo) * s.c_in;
        for (int ky = 0; ky < s.kh; ++ky, ++run) {
          const int iy = iy0 + ky;
          const bool inside = iy >= 0 && iy < s.h && body > 0;
          visit(run,
                inside ? img * image + (static_cast<ptrdiff_t>(iy) * s.w + ix0 + lo) * s.c_in
                       : ptrdiff_t{-1},
                head, body);
        }
      }
    }
  }
}

void im2col(const Conv2dShape& s, const Conv2dGeometry& g, const float* x, float* col) {
  const int width = s.kw * s.c_in;
  for_each_run(s, g, [&](size_t run, ptrdiff_t pixel, int head, int body) {
    float* dst = col + run * width;
    if (pixel < 0) {
      std::fill_n(dst, width, 0.0f);
      return;
    }
    std::fill_n(dst, head, 0.0f);
    std::copy_n(x + pixel, body, dst + head);
    std::fill_n(dst + head + body, width - head - body, 0.0f);
  });
}

// The adjoint of im2col: every entry of col is added to the input pixel it was copied from.
void col2im(const Conv2dShape& s, const Conv2dGeometry& g, const float* col, float* dx) {
  std::fill_n(dx, static_cast<size_t>(s.n) * s.h * s.w * s.c_in, 0.0f);
  const int width = s.kw * s.c_in;
  for_each_run(s, g, [&](size_t run, ptrdiff_t pixel, int head, int body) {
    if (pixel < 0) return;
    float* __restrict d = dx + pixel;
    const float* __restrict c = col + run * width + head;
    for (int i = 0; i < body; ++i) d[i] += c[i];
  });
}

}  // namespace

Conv2dGeometry conv2d_geometry(const Conv2dShape& s, const char* who) {
  auto fail = [who](const char* what) {
    throw std::invalid_argument(std::string(who) + ": " + what);
  };
  if (s.n < 0 || s.h <= 0 || s.w <= 0 || s.c_in <= 0 || s.c_out <= 0)
    fail("n must be >= 0 and h, w, c_in, c_out > 0");
  if (s.kh <= 0 || s.kw <= 0 || s.stride <= 0 || s.pad_h < 0 || s.pad_w < 0)
    fail("kernel size and stride must be > 0, padding >= 0");
  if (s.h + 2 * s.pad_h < s.kh || s.w + 2 * s.pad_w < s.kw)
    fail("the kernel is larger than the padded input");
  Conv2dGeometry g{s.out_h(), s.out_w(), 0, 0};
  g.rows = static_cast<size_t>(s.n) * g.out_h * g.out_w;
  g.cols = static_cast<size_t>(s.kh) * s.kw * s.c_in;
  if (g.rows > INT_MAX || g.cols > INT_MAX) fail("batch too large for one gemm (M or K > INT_MAX)");
  return g;
}

size_t conv2d_workspace_floats(const Conv2dShape& s) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_workspace_floats");
  return g.rows * g.cols;
}

// [0, dy16): the column matrix, M x K words of bf16 forward, M x K floats of dcol backward;
// [dy16, end): dy in bf16, M x c_out words, starting on a 16-byte boundary for the GEMMs.
size_t conv2d_bf16_workspace_floats(const Conv2dShape& s) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_bf16_workspace_floats");
  const size_t dy16 = (g.rows * g.cols + 3) / 4 * 4;
  return dy16 + (g.rows * static_cast<size_t>(s.c_out) + 1) / 2;
}

bool conv2d_direct_supported(const Conv2dShape& s) {
  return s.kh * s.kw * s.c_in <= kConv2dDirectMaxTaps && s.c_out >= 1 &&
         s.c_out <= kConv2dDirectMaxOut;
}

size_t conv2d_direct_blocks(const Conv2dShape& s) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_direct_blocks");
  return std::clamp<size_t>((g.rows + 63) / 64, 1, 1024);
}

size_t conv2d_direct_workspace_floats(const Conv2dShape& s) {
  return conv2d_direct_blocks(s) * static_cast<size_t>(s.kh * s.kw * s.c_in + 1) * s.c_out;
}

void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                        float* y, float* workspace) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_cpu");
  if (g.rows == 0) return;
  im2col(s, g, x, workspace);
  // Seed y with the bias rows so that the gemm (beta = 1) adds the convolution on top.
  float beta = 0.0f;
  if (b != nullptr) {
    for (size_t m = 0; m < g.rows; ++m) std::copy_n(b, s.c_out, y + m * s.c_out);
    beta = 1.0f;
  }
  const int rows = static_cast<int>(g.rows), cols = static_cast<int>(g.cols);
  gemm_cpu({.m = rows, .n = s.c_out, .k = cols, .beta = beta}, workspace, w, y);
  if (s.relu) relu_forward_cpu(y, y, g.rows * s.c_out);
}

void conv2d_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db, float* workspace) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_cpu");
  if (g.rows == 0) return;
  const int rows = static_cast<int>(g.rows), cols = static_cast<int>(g.cols);
  if (dw != nullptr) {
    im2col(s, g, x, workspace);
    gemm_cpu({.m = cols, .n = s.c_out, .k = rows, .trans_a = true, .beta = 1.0f}, workspace, dy,
             dw);
  }
  if (db != nullptr) {
    for (size_t m = 0; m < g.rows; ++m) {
      const float* row = dy + m * s.c_out;
      for (int j = 0; j < s.c_out; ++j) db[j] += row[j];
    }
  }
  if (dx != nullptr) {
    // The workspace is free again once dw has been taken: reuse it for dcol.
    gemm_cpu({.m = rows, .n = cols, .k = s.c_out, .trans_b = true}, dy, w, workspace);
    col2im(s, g, workspace, dx);
  }
}

}  // namespace lockstep::kernels
