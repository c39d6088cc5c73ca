#include "kernels/conv2d.h"

#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/activation.h"
#include "kernels/bf16.cuh"
#include "kernels/bias.cuh"
#include "kernels/cast.h"
#include "kernels/cuda_launch.cuh"
#include "kernels/gemm.h"

// The CUDA twin of conv2d.cpp, with the same im2col layout: row m = (image, oy, ox) of the column
// matrix holds the receptive field of output pixel m in HWIO order (ky, kx, ci), so
//   y[M, c_out] = col[M, K] . w[K, c_out],  dw += col^T . dy,  dcol = dy . w^T, then col2im.
// col2im is written as a gather: each input element sums the column entries that were copied from
// it, so no two threads write the same address (no atomics, and a fixed summation order).

namespace lockstep::kernels {

namespace {

// The shape as plain ints, passed by value to the kernels.
struct ConvDims {
  int n, h, w, c_in, kh, kw, stride, pad_h, pad_w, out_h, out_w;
};

ConvDims dims_of(const Conv2dShape& s, const Conv2dGeometry& g) {
  return {s.n, s.h, s.w, s.c_in, s.kh, s.kw, s.stride, s.pad_h, s.pad_w, g.out_h, g.out_w};
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(uint16_t* p, float v) { *p = cuda::to_bf16(v); }

// One thread per column entry (m, k): consecutive threads write consecutive entries, and for a
// fixed tap they read consecutive channels of one pixel. T is float, or uint16_t for a bf16 column
// matrix (the cast happens on the way, sparing a pass over the largest buffer of the layer).
template <class T>
__global__ void im2col_kernel(ConvDims d, const float* __restrict__ x, T* __restrict__ col,
                              size_t total) {
  const size_t k_cols = size_t(d.kh) * d.kw * d.c_in;
  for (size_t i = cuda::thread_index(); i < total; i += cuda::thread_stride()) {
    const size_t m = i / k_cols;
    const int k = static_cast<int>(i - m * k_cols);
    const int ci = k % d.c_in;
    const int kx = (k / d.c_in) % d.kw;
    const int ky = k / (d.c_in * d.kw);
    const int ox = static_cast<int>(m % d.out_w);
    const size_t rest = m / d.out_w;
    const int oy = static_cast<int>(rest % d.out_h);
    const size_t img = rest / d.out_h;
    const int iy = oy * d.stride - d.pad_h + ky;
    const int ix = ox * d.stride - d.pad_w + kx;
    const bool inside = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w;
    store(col + i, inside ? x[((img * d.h + iy) * d.w + ix) * d.c_in + ci] : 0.0f);
  }
}

// One thread per input element (img, iy, ix, ci): the taps (ky, kx) whose output pixel
// (oy, ox) = ((iy + pad_h - ky) / stride, (ix + pad_w - kx) / stride) is whole and in range.
__global__ void col2im_kernel(ConvDims d, const float* __restrict__ col, float* __restrict__ dx,
                              size_t total) {
  const size_t k_cols = size_t(d.kh) * d.kw * d.c_in;
  for (size_t i = cuda::thread_index(); i < total; i += cuda::thread_stride()) {
    const int ci = static_cast<int>(i % d.c_in);
    size_t rest = i / d.c_in;
    const int ix = static_cast<int>(rest % d.w);
    rest /= d.w;
    const int iy = static_cast<int>(rest % d.h);
    const size_t img = rest / d.h;
    float sum = 0.0f;
    for (int ky = 0; ky < d.kh; ++ky) {
      const int ty = iy + d.pad_h - ky;
      if (ty < 0) break;  // ty only falls as ky grows
      if (ty % d.stride != 0) continue;
      const int oy = ty / d.stride;
      if (oy >= d.out_h) continue;
      for (int kx = 0; kx < d.kw; ++kx) {
        const int tx = ix + d.pad_w - kx;
        if (tx < 0) break;
        if (tx % d.stride != 0) continue;
        const int ox = tx / d.stride;
        if (ox >= d.out_w) continue;
        const size_t m = (img * d.out_h + oy) * d.out_w + ox;
        sum += col[m * k_cols + (ky * d.kw + kx) * d.c_in + ci];
      }
    }
    dx[i] = sum;
  }
}

template <class T>
void im2col(const ConvDims& d, const Conv2dGeometry& g, const float* x, T* col,
            cudaStream_t stream) {
  const size_t total = g.rows * g.cols;
  im2col_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(d, x, col, total);
  LS_CHECK_LAUNCH("im2col_kernel");
}

void col2im(const ConvDims& d, const float* dcol, float* dx, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(d.n) * d.h * d.w * d.c_in;
  col2im_kernel<<<cuda::grid_for(total), cuda::kThreads, 0, stream>>>(d, dcol, dx, total);
  LS_CHECK_LAUNCH("col2im_kernel");
}

// The bias seeds y (the gemm then adds with beta = 1); without one the gemm overwrites y.
float seed_bias(float* y, const float* b, const Conv2dGeometry& g, int c_out, cudaStream_t stream) {
  if (b == nullptr) return 0.0f;
  cuda::fill_rows(y, b, g.rows, c_out, stream);
  return 1.0f;
}

}  // namespace

void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b,
                         float* y, float* workspace, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_cuda");
  if (g.rows == 0) return;
  im2col(dims_of(s, g), g, x, workspace, stream);
  const float beta = seed_bias(y, b, g, s.c_out, stream);
  const int rows = static_cast<int>(g.rows), cols = static_cast<int>(g.cols);
  gemm_cuda({.m = rows, .n = s.c_out, .k = cols, .beta = beta}, workspace, w, y, stream);
  if (s.relu) relu_forward_cuda(y, y, g.rows * s.c_out, stream);
}

void conv2d_backward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                          float* dx, float* dw, float* db, float* workspace, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_cuda");
  if (g.rows == 0) return;
  const ConvDims d = dims_of(s, g);
  const int rows = static_cast<int>(g.rows), cols = static_cast<int>(g.cols);
  if (dw != nullptr) {
    im2col(d, g, x, workspace, stream);
    gemm_cuda({.m = cols, .n = s.c_out, .k = rows, .trans_a = true, .beta = 1.0f}, workspace, dy,
              dw, stream);
  }
  if (db != nullptr) cuda::add_column_sums(dy, g.rows, s.c_out, db, stream);
  if (dx != nullptr) {
    // Stream order guarantees the dw gemm has read the workspace before dcol overwrites it.
    gemm_cuda({.m = rows, .n = cols, .k = s.c_out, .trans_b = true}, dy, w, workspace, stream);
    col2im(d, workspace, dx, stream);
  }
}

void conv2d_forward_bf16_cuda(const Conv2dShape& s, const float* x, const uint16_t* w16,
                              const float* b, float* y, float* workspace, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_bf16_cuda");
  if (g.rows == 0) return;
  auto* col16 = reinterpret_cast<uint16_t*>(workspace);
  im2col(dims_of(s, g), g, x, col16, stream);
  const float beta = seed_bias(y, b, g, s.c_out, stream);
  const int rows = static_cast<int>(g.rows), cols = static_cast<int>(g.cols);
  gemm_bf16_cuda({.m = rows, .n = s.c_out, .k = cols, .beta = beta}, col16, w16, y, stream);
  if (s.relu) relu_forward_cuda(y, y, g.rows * s.c_out, stream);
}

void conv2d_backward_bf16_cuda(const Conv2dShape& s, const float* x, const uint16_t* w16,
                               const float* dy, float* dx, float* dw, float* db, float* workspace,
                               cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_backward_bf16_cuda");
  if (g.rows == 0) return;
  const ConvDims d = dims_of(s, g);
  const int rows = static_cast<int>(g.rows), cols = static_cast<int>(g.cols);
  const size_t dy_count = g.rows * static_cast<size_t>(s.c_out);
  // dy16 closes the workspace (layout: conv2d_bf16_workspace_floats in conv2d.cpp).
  auto* dy16 = reinterpret_cast<uint16_t*>(workspace + conv2d_bf16_workspace_floats(s) -
                                           (dy_count + 1) / 2);
  if (dw != nullptr || dx != nullptr) cast_f32_to_bf16_cuda(dy, dy16, dy_count, stream);
  if (dw != nullptr) {
    auto* col16 = reinterpret_cast<uint16_t*>(workspace);
    im2col(d, g, x, col16, stream);
    gemm_bf16_cuda({.m = cols, .n = s.c_out, .k = rows, .trans_a = true, .beta = 1.0f}, col16,
                   dy16, dw, stream);
  }
  if (db != nullptr) cuda::add_column_sums(dy, g.rows, s.c_out, db, stream);
  if (dx != nullptr) {
    // dcol in fp32 over the column matrix's place: stream order puts it after the dw gemm. col2im
    // sums up to kh * kw entries per input in fp32; a bf16 dcol would halve this traffic.
    gemm_bf16_cuda({.m = rows, .n = cols, .k = s.c_out, .trans_b = true}, dy16, w16, workspace,
                   stream);
    col2im(d, workspace, dx, stream);
  }
}

}  // namespace lockstep::kernels
