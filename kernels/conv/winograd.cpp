#include "kernels/conv/winograd.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/parallel.h"

namespace lockstep::kernels {

namespace {

// 16 floats, one AVX-512 register. Only functions built for AVX-512 touch it: the helpers below
// are inlined into the LS_AVX512 entry points.
typedef float F __attribute__((vector_size(64)));
#define LS_INLINE_AVX512 LS_AVX512 LS_ALWAYS_INLINE
#define LS_LAMBDA_AVX512 __attribute__((target("avx512f"), always_inline))
constexpr int kE = 36;      // the 6x6 transformed positions of a tile
constexpr int kChunk = 16;  // images per partial sum of the weight gradient
constexpr int kPass = 4;    // images whose transforms one weight-gradient product spans
constexpr int kRowPad = 8;  // tiles per image rounded up to this (the products' row blocks)

LS_INLINE_AVX512 F load(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
LS_INLINE_AVX512 void store(float* p, F v) { std::memcpy(p, &v, sizeof(v)); }

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

// The 1-D transforms, applied to columns and then to rows.
// B^T d: a 6-point input patch to its 6 transformed values.
LS_INLINE_AVX512 void input_1d(const F d[6], F o[6]) {
  o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  o[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]);
  o[2] = 4.0f * (d[1] - d[2]) + d[4] - d[3];
  o[3] = 2.0f * (d[3] - d[1]) + d[4] - d[2];
  o[4] = 2.0f * (d[1] - d[3]) + d[4] - d[2];
  o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}
// A^T m: 6 products to 4 outputs.
LS_INLINE_AVX512 void output_1d(const F m[6], F o[4]) {
  const F a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
  o[0] = m[0] + a + c;
  o[1] = b + 2.0f * d;
  o[2] = a + 4.0f * c;
  o[3] = b + 8.0f * d + m[5];
}
// G g: 3 taps to 6 transformed values.
LS_INLINE_AVX512 void kernel_1d(const F g[3], F o[6]) {
  const F even = g[0] + g[2];
  o[0] = 0.25f * g[0];
  o[1] = (-1.0f / 6.0f) * (even + g[1]);
  o[2] = (-1.0f / 6.0f) * (even - g[1]);
  o[3] = (1.0f / 24.0f) * g[0] + (1.0f / 12.0f) * g[1] + (1.0f / 6.0f) * g[2];
  o[4] = (1.0f / 24.0f) * g[0] - (1.0f / 12.0f) * g[1] + (1.0f / 6.0f) * g[2];
  o[5] = g[2];
}
// A y: a 4-output gradient to its 6 transformed values (the transpose of output_1d).
LS_INLINE_AVX512 void grad_output_1d(const F y[4], F o[6]) {
  const F a = y[0] + y[2], b = y[1] + y[3], c = y[0] + 4.0f * y[2], d = 2.0f * y[1] + 8.0f * y[3];
  o[0] = y[0];
  o[1] = a + b;
  o[2] = a - b;
  o[3] = c + d;
  o[4] = c - d;
  o[5] = y[3];
}
// G^T u: 6 transformed gradients to 3 taps (the transpose of kernel_1d).
LS_INLINE_AVX512 void grad_kernel_1d(const F u[6], F o[3]) {
  const F s12 = u[1] + u[2], d12 = u[2] - u[1], s34 = u[3] + u[4], d34 = u[3] - u[4];
  o[0] = 0.25f * u[0] - (1.0f / 6.0f) * s12 + (1.0f / 24.0f) * s34;
  o[1] = (1.0f / 6.0f) * d12 + (1.0f / 12.0f) * d34;
  o[2] = (1.0f / 6.0f) * (s34 - s12) + u[5];
}

// T x T^T for a 1-D transform T of N values to M (one of the above): down each column of x, then
// along each row of the result, each row handed on as it is done. x(r, q) gives the input, and
// out(r, row) takes the M values of output row r; both are lambdas marked LS_LAMBDA_AVX512 (a
// lambda does not inherit its function's target).
template <int N, int M, void (*T)(const F*, F*), class In, class Out>
LS_INLINE_AVX512 void transform_2d(In x, Out out) {
  F col[M][N];  // col[r][q]: T applied down column q
  for (int q = 0; q < N; ++q) {
    F v[N], o[M];
    for (int r = 0; r < N; ++r) v[r] = x(r, q);
    T(v, o);
    for (int r = 0; r < M; ++r) col[r][q] = o[r];
  }
  for (int r = 0; r < M; ++r) {
    F o[M];
    T(col[r], o);
    out(r, o);
  }
}

// Where the transforms put a tile's 36 values: position e of tile k at e * e_stride + k * k_stride.
// Always [k][e][c] (e_stride = c); k_stride = kE * c in the convolutions, whose products take a
// tile per row, and one cache line more in the weight gradient, whose products run down the tiles
// of a position: with a power-of-two multiple there, the tiles' rows would share a few L1 sets.
struct Layout {
  size_t e_stride, k_stride;
  float* at(float* base, int k, int e) const { return base + e * e_stride + k * k_stride; }
};

LS_INLINE_AVX512 void zero_rows(const Tiles& t, int c, float* v, Layout l) {
  for (int k = t.count; k < t.rows; ++k)
    for (int e = 0; e < kE; ++e) std::memset(l.at(v, k, e), 0, sizeof(float) * c);
}

// Image x's tiles (c channels in blocks) transformed, B^T d B over each 6x6 patch (zero outside
// the image); the rows from t.count to t.rows zero.
LS_INLINE_AVX512 void transform_input(const Tiles& t, int c, const float* x, float* v, Layout l) {
  const size_t plane = static_cast<size_t>(t.h) * t.w * 16;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const int k = ty * t.tw + tx;
      for (int cb = 0; cb < c / 16; ++cb) {
        const float* base = x + cb * plane;
        F d[6][6];
        for (int r = 0; r < 6; ++r) {
          const int iy = 4 * ty - 1 + r;
          for (int q = 0; q < 6; ++q) {
            const int ix = 4 * tx - 1 + q;
            d[r][q] = iy >= 0 && iy < t.h && ix >= 0 && ix < t.w
                          ? load(base + (static_cast<size_t>(iy) * t.w + ix) * 16)
                          : F{};
          }
        }
        transform_2d<6, 6, input_1d>([&](int r, int q) LS_LAMBDA_AVX512 { return d[r][q]; },
                                     [&](int r, const F* o) LS_LAMBDA_AVX512 {
                                       for (int q = 0; q < 6; ++q)
                                         store(l.at(v, k, r * 6 + q) + cb * 16, o[q]);
                                     });
      }
    }
  zero_rows(t, c, v, l);
}

// Image y (c channels in blocks) from its products M[t][e][c]: A^T m A per tile, + bias, the
// ReLU when asked, the outputs past the image's edge dropped.
LS_INLINE_AVX512 void transform_output(const Tiles& t, int c, const float* m, const float* b,
                                       bool relu, float* y) {
  const size_t plane = static_cast<size_t>(t.h) * t.w * 16;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* in = m + static_cast<size_t>(ty * t.tw + tx) * kE * c;
      for (int cb = 0; cb < c / 16; ++cb) {
        const F bias = b != nullptr ? load(b + cb * 16) : F{};
        float* base = y + cb * plane;
        transform_2d<6, 4, output_1d>(
            [&](int r, int q) LS_LAMBDA_AVX512 { return load(in + (r * 6 + q) * c + cb * 16); },
            [&](int r, const F* o) LS_LAMBDA_AVX512 {
              const int oy = 4 * ty + r;
              for (int q = 0; q < 4 && oy < t.h && 4 * tx + q < t.w; ++q) {
                F out = o[q] + bias;
                if (relu) out = out > F{} ? out : F{};
                store(base + (static_cast<size_t>(oy) * t.w + 4 * tx + q) * 16, out);
              }
            });
      }
    }
}

// Image dy's tiles transformed for the weight gradient: A dY A^T over each 4x4 tile (zero past
// the image's edge); the rows from t.count to t.rows zero.
LS_INLINE_AVX512 void transform_grad_output(const Tiles& t, int c, const float* dy, float* out,
                                            Layout l) {
  const size_t plane = static_cast<size_t>(t.h) * t.w * 16;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const int k = ty * t.tw + tx;
      for (int cb = 0; cb < c / 16; ++cb) {
        const float* base = dy + cb * plane;
        transform_2d<4, 6, grad_output_1d>(
            [&](int r, int q) LS_LAMBDA_AVX512 {
              const int oy = 4 * ty + r, ox = 4 * tx + q;
              return oy < t.h && ox < t.w ? load(base + (static_cast<size_t>(oy) * t.w + ox) * 16)
                                          : F{};
            },
            [&](int r, const F* o) LS_LAMBDA_AVX512 {
              for (int q = 0; q < 6; ++q) store(l.at(out, k, r * 6 + q) + cb * 16, o[q]);
            });
      }
    }
  zero_rows(t, c, out, l);
}

// U[e][i][o] = G g G^T for each (input channel i, output channel o), g[ky][kx][i][o] (HWIO).
LS_AVX512 void transform_kernel(const float* g, int ci, int co, float* u) {
  for (int i = 0; i < ci; ++i)
    for (int ob = 0; ob < co / 16; ++ob) {
      transform_2d<3, 6, kernel_1d>(
          [&](int ky, int kx) LS_LAMBDA_AVX512 {
            return load(g + (static_cast<size_t>(ky * 3 + kx) * ci + i) * co + ob * 16);
          },
          [&](int r, const F* o) LS_LAMBDA_AVX512 {
            for (int q = 0; q < 6; ++q)
              store(u + (static_cast<size_t>(r * 6 + q) * ci + i) * co + ob * 16, o[q]);
          });
    }
}

// dw[ky][kx][i][o] += (G^T dU G)[ky][kx], dU[e][i][o].
LS_AVX512 void add_kernel_gradient(const float* du, int ci, int co, float* dw) {
  for (int i = 0; i < ci; ++i)
    for (int ob = 0; ob < co / 16; ++ob) {
      transform_2d<6, 3, grad_kernel_1d>(
          [&](int r, int q) LS_LAMBDA_AVX512 {
            return load(du + (static_cast<size_t>(r * 6 + q) * ci + i) * co + ob * 16);
          },
          [&](int ky, const F* o) LS_LAMBDA_AVX512 {
            for (int kx = 0; kx < 3; ++kx) {
              float* p = dw + (static_cast<size_t>(ky * 3 + kx) * ci + i) * co + ob * 16;
              store(p, load(p) + o[kx]);
            }
          });
    }
}

// One block of a product, R rows x NV vectors of 16 columns, over k = 0..K-1:
// c[i][j] (+)= sum_k a(i, k) * b[k][j], a(i, k) = a[i * a_row + k * a_k] (a broadcast scalar).
template <int R, int NV, bool kAdd>
LS_INLINE_AVX512 void product_block(const float* a, size_t a_row, size_t a_k, const float* b,
                                    size_t b_k, float* c, size_t c_row, int K) {
  F acc[R][NV];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = kAdd ? load(c + i * c_row + j * 16) : F{};
  for (int k = 0; k < K; ++k) {
    F bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = load(b + k * b_k + j * 16);
    for (int i = 0; i < R; ++i) {
      const float av = a[i * a_row + k * a_k];
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) store(c + i * c_row + j * 16, acc[i][j]);
}

// c (rows x n, row stride c_row) (+)= a (rows x K, through a_row / a_k) b (K x n, row stride
// b_k): row blocks of 4 (n >= 64 left) or 8, column blocks of up to 64.
template <bool kAdd>
LS_INLINE_AVX512 void product(const float* a, size_t a_row, size_t a_k, const float* b, size_t b_k,
                              float* c, size_t c_row, int rows, int n, int K) {
  for (int n0 = 0; n0 < n; n0 += 64) {
    const int nv = std::min(4, (n - n0) / 16);
    const float* bn = b + n0;
    float* cn = c + n0;
    if (nv == 4) {
      for (int r = 0; r < rows; r += 4)
        product_block<4, 4, kAdd>(a + r * a_row, a_row, a_k, bn, b_k, cn + r * c_row, c_row, K);
      continue;
    }
    for (int r = 0; r < rows; r += 8) {
      const float* ar = a + r * a_row;
      float* cr = cn + r * c_row;
      if (nv == 3)
        product_block<8, 3, kAdd>(ar, a_row, a_k, bn, b_k, cr, c_row, K);
      else if (nv == 2)
        product_block<8, 2, kAdd>(ar, a_row, a_k, bn, b_k, cr, c_row, K);
      else
        product_block<8, 1, kAdd>(ar, a_row, a_k, bn, b_k, cr, c_row, K);
    }
  }
}

// Per-thread scratch, kept between calls (no allocation a step once grown).
std::vector<float>& scratch(int which) {
  thread_local std::vector<float> buffers[2];
  return buffers[which];
}
float* sized(int which, size_t floats) {
  std::vector<float>& v = scratch(which);
  if (v.size() < floats) v.resize(floats);
  return v.data();
}

// Images [i0, i1) of a convolution of x (ci channels) by the transformed kernel u into y (co
// channels): the forward pass, and the input gradient's (dy by the rotated kernel).
LS_AVX512 void convolve_images(const Tiles& t, int ci, int co, const float* x, const float* u,
                               const float* b, bool relu, float* y, size_t i0, size_t i1) {
  const size_t x_image = static_cast<size_t>(t.h) * t.w * ci;
  const size_t y_image = static_cast<size_t>(t.h) * t.w * co;
  float* v = sized(0, static_cast<size_t>(t.rows) * kE * ci);
  float* m = sized(1, static_cast<size_t>(t.rows) * kE * co);
  for (size_t img = i0; img < i1; ++img) {
    transform_input(t, ci, x + img * x_image, v, {size_t(ci), size_t(kE) * ci});
    for (int e = 0; e < kE; ++e)
      product<false>(v + e * ci, static_cast<size_t>(kE) * ci, 1,
                     u + static_cast<size_t>(e) * ci * co, co, m + e * co,
                     static_cast<size_t>(kE) * co, t.rows, co, ci);
    transform_output(t, co, m, b, relu, y + img * y_image);
  }
}

// Images [i0, i1) (one chunk) of the weight gradient: du (kE x ci x co, then co for the bias)
// overwritten with the chunk's sum.
LS_AVX512 void gradient_chunk(const Tiles& t, int ci, int co, const float* x, const float* dy,
                              float* du, size_t i0, size_t i1) {
  const size_t x_image = static_cast<size_t>(t.h) * t.w * ci;
  const size_t y_image = static_cast<size_t>(t.h) * t.w * co;
  // A pass's transforms, [k][e][c], each tile one cache line further on than its values need
  // (Layout).
  const size_t tiles = static_cast<size_t>(t.rows) * kPass;
  const size_t v_k = kE * ci + 16, g_k = kE * co + 16;
  float* v = sized(0, v_k * tiles);
  float* g = sized(1, g_k * tiles);
  std::memset(du, 0, sizeof(float) * (static_cast<size_t>(kE) * ci * co + co));
  float* db = du + static_cast<size_t>(kE) * ci * co;
  for (size_t p0 = i0; p0 < i1; p0 += kPass) {
    const size_t p1 = std::min(i1, p0 + kPass);
    for (size_t img = p0; img < p1; ++img) {
      const size_t first = (img - p0) * t.rows;  // the image's first tile in the pass
      transform_input(t, ci, x + img * x_image, v + first * v_k, {size_t(ci), v_k});
      const float* d = dy + img * y_image;
      transform_grad_output(t, co, d, g + first * g_k, {size_t(co), g_k});
      for (int ob = 0; ob < co / 16; ++ob) {
        const float* plane = d + static_cast<size_t>(ob) * t.h * t.w * 16;
        F sum{};
        for (int q = 0; q < t.h * t.w; ++q) sum += load(plane + q * 16);
        store(db + ob * 16, load(db + ob * 16) + sum);
      }
    }
    // dU[e] (ci x co) += sum over the pass's tiles k of V[k][e][i] * Y[k][e][o].
    const int K = static_cast<int>(p1 - p0) * t.rows;
    for (int e = 0; e < kE; ++e)
      product<true>(v + e * ci, 1, v_k, g + e * co, g_k, du + static_cast<size_t>(e) * ci * co, co,
                    ci, co, K);
  }
}

void check(const Conv2dShape& s, const char* who) {
  conv2d_geometry(s, who);
  if (!winograd_supported(s))
    throw std::invalid_argument(std::string(who) +
                                ": needs a 3x3 kernel, stride 1, padding 1 and input and output "
                                "channels that are multiples of 16");
  if (!winograd_fast())
    throw std::logic_error(std::string(who) + ": needs AVX-512 (winograd_fast() is false)");
}

}  // namespace

bool winograd_supported(const Conv2dShape& s) {
  return s.kh == 3 && s.kw == 3 && s.stride == 1 && s.pad_h == 1 && s.pad_w == 1 && s.c_in > 0 &&
         s.c_in % 16 == 0 && s.c_out > 0 && s.c_out % 16 == 0;
}

bool winograd_fast() { return cpu_avx512f(); }

bool winograd_preferred(const Conv2dShape& s) {
  if (!winograd_supported(s) || !winograd_fast()) return false;
  const Tiles t(s);
  const double bytes = 4.0 * t.rows * kE * (static_cast<double>(s.c_in) + s.c_out);
  return bytes <= 1024.0 * 1024.0;
}

void winograd_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                          float* y) {
  check(s, "winograd_forward_cpu");
  const Tiles t(s);
  thread_local std::vector<float> u;
  u.resize(static_cast<size_t>(kE) * s.c_in * s.c_out);
  const float* kernel = u.data();  // the worker threads' `u` would be their own
  transform_kernel(w, s.c_in, s.c_out, u.data());
  parallel_chunks(static_cast<size_t>(s.n), 1, [&](size_t i0, size_t i1) {
    convolve_images(t, s.c_in, s.c_out, x, kernel, b, s.relu, y, i0, i1);
  });
}

void winograd_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                           float* dx, float* dw, float* db) {
  check(s, "winograd_backward_cpu");
  const Tiles t(s);
  const int ci = s.c_in, co = s.c_out;
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
    transform_kernel(rotated.data(), co, ci, u.data());
    const float* kernel = u.data();
    parallel_chunks(static_cast<size_t>(s.n), 1, [&](size_t i0, size_t i1) {
      convolve_images(t, co, ci, dy, kernel, nullptr, false, dx, i0, i1);
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
      gradient_chunk(t, ci, co, x, dy, parts + c * per_chunk, c * kChunk,
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
  add_kernel_gradient(total, ci, co, dw);
  if (db != nullptr)
    for (int o = 0; o < co; ++o) db[o] += total[static_cast<size_t>(kE) * ci * co + o];
}

}  // namespace lockstep::kernels
