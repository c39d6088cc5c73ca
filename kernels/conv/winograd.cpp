#include "kernels/conv/winograd.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/lanes16.h"
#include "kernels/parallel.h"

// GCC reports the AVX2 copy's 16-float vectors (winograd_isa.inc) at the end of the file: they
// pass only between functions inlined into their target's entry points, no ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace lockstep::kernels {

namespace {

constexpr int kE = 36;      // the 6x6 transformed positions of a tile
constexpr int kChunk = 16;  // images per partial sum of the weight gradient
constexpr int kPass = 4;    // images whose transforms one weight-gradient product spans
constexpr int kRowPad = 8;  // tiles per image rounded up to this (the products' row blocks)

// One image's tiles: 4x4 outputs each, th x tw of them, rounded up to kRowPad rows (zero rows).
struct Tiles {
  int h, w, th, tw, count, rows;
  explicit Tiles(const Conv2dShape& s)
      : h(s.h),
        w(s.w),
        th((s.h + 3) / 4),
        tw((s.w + 3) / 4),
        count(th * tw),
        rows((count + kRowPad - 1) / kRowPad * kRowPad) {}
};

// Where the transforms put a tile's 36 values: position e of tile k at e * e_stride + k * k_stride.
// Always [k][e][c] (e_stride = c); k_stride = kE * c in the convolutions, whose products take a
// tile per row, and one cache line more in the weight gradient, whose products run down the tiles
// of a position: with a power-of-two multiple there, the tiles' rows would share a few L1 sets.
struct Layout {
  size_t e_stride, k_stride;
  float* at(float* base, int k, int e) const { return base + e * e_stride + k * k_stride; }
};

// A 2x2 max-pool of stride 2 fused with the convolution (winograd_pool_*_cpu): where a pooled
// position's 16 channels lie (its size, blocks or NHWC), a ReLU after the pool, and, forward, the
// pooled output and the windows' winning taps written, or, backward, the pooled gradient and those
// taps read.
struct Pool2 {
  lanes16::OutIndex at;
  bool relu = false;
  float* y = nullptr;  // forward: written, with the winning taps into argmax
  int8_t* argmax = nullptr;
  const float* dy = nullptr;  // backward: read, with the forward's taps from taps
  const int8_t* taps = nullptr;
};

// One build's entry points (winograd_isa.inc's kBuild): the per-image passes, for NHWC [0] and
// blocked [1] activations (a fused pool's, or none), and the kernel's transform and gradient.
struct Build {
  void (*convolve[2])(const Tiles& t, int ci, int co, const float* x, const float* u,
                      const float* b, bool relu, float* y, const Pool2* pool, size_t i0, size_t i1);
  void (*gradient[2])(const Tiles& t, int ci, int co, const float* x, const float* dy,
                      const Pool2* pool, float* du, size_t i0, size_t i1);
  void (*kernel_transform)(const float* g, int ci, int co, float* u);
  void (*kernel_gradient)(const float* du, int ci, int co, float* dw);
};

// The transforms and products, once for AVX-512 and once for AVX2 (winograd_isa.inc).
#define LS_WINO_NS avx512
#define LS_WINO_ISA "avx512f"
#define LS_WINO_WIDE 1
#include "kernels/conv/winograd_isa.inc"
#undef LS_WINO_NS
#undef LS_WINO_ISA
#undef LS_WINO_WIDE
#define LS_WINO_NS avx2
#define LS_WINO_ISA "avx2,fma"
#define LS_WINO_WIDE 0
#include "kernels/conv/winograd_isa.inc"
#undef LS_WINO_NS
#undef LS_WINO_ISA
#undef LS_WINO_WIDE

// This CPU's build (winograd_fast() is true).
const Build& build() { return cpu_avx512f() ? avx512::kBuild : avx2::kBuild; }

void check(const Conv2dShape& s, const char* who) {
  conv2d_geometry(s, who);
  if (!winograd_supported(s))
    throw std::invalid_argument(std::string(who) +
                                ": needs a 3x3 kernel, stride 1, padding 1 and input and output "
                                "channels that are multiples of 16");
  if (!winograd_fast())
    throw std::logic_error(std::string(who) + ": needs AVX-512 or AVX2 (winograd_fast() is false)");
}

}  // namespace

bool winograd_supported(const Conv2dShape& s) {
  return s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad_h == 1 && s.pad_w == 1 && s.c_in > 0 &&
         s.c_in % 16 == 0 && s.c_out > 0 && s.c_out % 16 == 0;
}

bool winograd_fast() { return cpu_avx512f() || cpu_avx2(); }

bool winograd_on_nhwc() { return !cpu_avx512f() && cpu_avx2(); }

bool winograd_preferred(const Conv2dShape& s) {
  if (!winograd_supported(s) || !winograd_fast()) return false;
  const Tiles t(s);
  const double bytes = 4.0 * t.rows * kE * (static_cast<double>(s.c_in) + s.c_out);
  return bytes <= 1024.0 * 1024.0;
}

namespace {

// The forward pass, into y or (pool) the pooled output.
void forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y,
             const Pool2* pool, bool blocked) {
  const Tiles t(s);
  thread_local std::vector<float> u;
  u.resize(static_cast<size_t>(kE) * s.c_in * s.c_out);
  const float* kernel = u.data();  // the worker threads' `u` would be their own
  const Build& here = build();
  here.kernel_transform(w, s.c_in, s.c_out, u.data());
  parallel_chunks(static_cast<size_t>(s.n), 1, [&](size_t i0, size_t i1) {
    here.convolve[blocked](t, s.c_in, s.c_out, x, kernel, b, s.relu, y, pool, i0, i1);
  });
}

// The backward pass, from dy or (pool) the pooled gradient.
void backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
              const Pool2* pool, float* dx, float* dw, float* db, bool blocked) {
  const Tiles t(s);
  const int ci = s.c_in, co = s.c_out;
  const Build& here = build();
  if (dx != nullptr) {
    // dx = dy convolved with the kernel rotated by 180 degrees, its channels swapped:
    // rotated[ky][kx][o][i] = w[2 - ky][2 - kx][i][o].
    thread_local std::vector<float> rotated, u;
    rotated.resize(static_cast<size_t>(9) * ci * co);
    for (int tap = 0; tap < 9; ++tap)
      for (int i = 0; i < ci; ++i)
        for (int o = 0; o < co; ++o)
          rotated[(static_cast<size_t>(tap) * co + o) * ci + i] =
              w[(static_cast<size_t>(8 - tap) * ci + i) * co + o];
    u.resize(static_cast<size_t>(kE) * ci * co);
    here.kernel_transform(rotated.data(), co, ci, u.data());
    const float* kernel = u.data();
    parallel_chunks(static_cast<size_t>(s.n), 1, [&](size_t i0, size_t i1) {
      here.convolve[blocked](t, co, ci, dy, kernel, nullptr, false, dx, pool, i0, i1);
    });
  }
  // The weight and bias gradients: one partial sum per chunk of kChunk images, added in order.
  const size_t chunks = (static_cast<size_t>(s.n) + kChunk - 1) / kChunk;
  const size_t per_chunk = static_cast<size_t>(kE) * ci * co + co;
  thread_local std::vector<float> partial;
  partial.resize(chunks * per_chunk);
  float* parts = partial.data();
  parallel_chunks(chunks, 1, [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c)
      here.gradient[blocked](t, ci, co, x, dy, pool, parts + c * per_chunk, c * kChunk,
                             std::min<size_t>(s.n, (c + 1) * kChunk));
  });
  // The chunks in order into the first, spread over the threads by element: the same bits.
  float* total = parts;
  parallel_chunks(per_chunk, 4096, [&](size_t i0, size_t i1) {
    for (size_t c = 1; c < chunks; ++c) {
      const float* part = parts + c * per_chunk;
      for (size_t i = i0; i < i1; ++i) total[i] += part[i];
    }
  });
  here.kernel_gradient(total, ci, co, dw);
  if (db != nullptr)
    for (int o = 0; o < co; ++o) db[o] += total[static_cast<size_t>(kE) * ci * co + o];
}

Pool2 pool_of(const Conv2dShape& s, bool relu, bool pooled_blocked16, const char* who) {
  check(s, who);
  if (s.relu)
    throw std::invalid_argument(std::string(who) +
                                ": a ReLU before the pool is not fused (pass relu: after it)");
  if (s.h < 2 || s.w < 2)
    throw std::invalid_argument(std::string(who) + ": the image (" + std::to_string(s.h) + "x" +
                                std::to_string(s.w) + ") is smaller than the 2x2 window");
  Pool2 p;
  p.at = {s.h / 2, s.w / 2, s.c_out / 16, s.c_out, pooled_blocked16};
  p.relu = relu;
  return p;
}

}  // namespace

void winograd_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                          float* y, bool blocked) {
  check(s, "winograd_forward_cpu");
  forward(s, x, w, b, y, nullptr, blocked);
}

void winograd_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                           float* dx, float* dw, float* db, bool blocked) {
  check(s, "winograd_backward_cpu");
  backward(s, x, w, dy, nullptr, dx, dw, db, blocked);
}

void winograd_pool_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                               float* y, int8_t* argmax, bool relu, bool blocked,
                               bool y_blocked16) {
  Pool2 p = pool_of(s, relu, y_blocked16, "winograd_pool_forward_cpu");
  p.y = y;
  p.argmax = argmax;
  forward(s, x, w, b, nullptr, &p, blocked);
}

void winograd_pool_backward_cpu(const Conv2dShape& s, const float* x, const float* w,
                                const float* dy, const int8_t* argmax, float* dx, float* dw,
                                float* db, bool blocked, bool dy_blocked16) {
  Pool2 p = pool_of(s, false, dy_blocked16, "winograd_pool_backward_cpu");
  p.dy = dy;
  p.taps = argmax;
  backward(s, x, w, nullptr, &p, dx, dw, db, blocked);
}

}  // namespace lockstep::kernels
