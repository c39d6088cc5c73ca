#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/activation.h"
#include "kernels/cast.h"
#include "kernels/conv/conv2d.h"
#include "kernels/conv/direct.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/gemm.h"

// The CUDA twin of conv2d.cpp, with the same im2col layout: row m = (image, oy, ox) of the column
// matrix holds the receptive field of output pixel m in HWIO order (ky, kx, ci), so
//   y[M, c_out] = col[M, K] . w[K, c_out],  dw += col^T . dy,  dcol = dy . w^T, then col2im.
// col2im is written as a gather: each input element sums the column entries that were copied from
// it, so no two threads write the same address (no atomics, and a fixed summation order).

namespace lockstep::kernels {

namespace {

using direct::ConvDims;
using direct::dims_of;
using direct::dispatch;
using direct::operand;
using direct::write_block_partials;

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

// One thread per output (img, oy, ox, co): consecutive threads write consecutive channels of one
// pixel and read the same inputs (a broadcast) and consecutive weights. Index: the type of the
// output's flat index and the divisions that take it apart, 32-bit where the outputs allow (a
// 64-bit division is a long software sequence on the GPU; at batch 1024 of the CNN's first layer
// four of them per output made the pass three times cuDNN's). The sums are the same either way.
template <bool kBf16, class Index>
__global__ void direct_forward_kernel(ConvDims d, int c_out, const float* __restrict__ x,
                                      const float* __restrict__ w, const float* __restrict__ b,
                                      float* __restrict__ y, bool relu, Index total) {
  const Index stride = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int co = static_cast<int>(i % Index(c_out));
    const Index m = i / Index(c_out);
    const int ox = static_cast<int>(m % Index(d.out_w));
    const Index rest = m / Index(d.out_w);
    const int oy = static_cast<int>(rest % Index(d.out_h));
    const size_t img = rest / Index(d.out_h);
    float acc = 0.0f;
    for (int ky = 0; ky < d.kh; ++ky) {
      const int iy = oy * d.stride - d.pad_h + ky;
      if (iy < 0 || iy >= d.h) continue;
      for (int kx = 0; kx < d.kw; ++kx) {
        const int ix = ox * d.stride - d.pad_w + kx;
        if (ix < 0 || ix >= d.w) continue;
        const float* xp = x + ((img * d.h + iy) * d.w + ix) * d.c_in;
        const float* wp = w + size_t((ky * d.kw + kx) * d.c_in) * c_out + co;
        for (int ci = 0; ci < d.c_in; ++ci)
          acc += operand<kBf16>(xp[ci]) * operand<kBf16>(wp[size_t(ci) * c_out]);
      }
    }
    const float v = acc + (b != nullptr ? b[co] : 0.0f);
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// The filter pass's first half. Block `blk` sums rows [blk * chunk, (blk + 1) * chunk) of the
// im2col view: its threads form groups of c_out, group g taking rows g, g + groups, ...; each
// thread keeps taps + 1 sums (the last the bias's) for its channel, the groups' sums are added in
// group order through shared memory, and the block writes part[blk][k][co].
template <bool kBf16, class Index>
__global__ void direct_filter_partial_kernel(ConvDims d, int c_out, const float* __restrict__ x,
                                             const float* __restrict__ dy, float* __restrict__ part,
                                             Index rows, Index chunk) {
  const int taps = d.kh * d.kw * d.c_in;
  const int groups = blockDim.x / c_out;
  const int co = threadIdx.x % c_out, g = threadIdx.x / c_out;
  float acc[kConv2dDirectMaxTaps + 1];
#pragma unroll
  for (int k = 0; k <= kConv2dDirectMaxTaps; ++k) acc[k] = 0.0f;
  const Index first = Index(blockIdx.x) * chunk, last = min(rows, first + chunk);
  for (Index m = first + g; m < last; m += groups) {
    const float grad = operand<kBf16>(dy[size_t(m) * c_out + co]);
    const int ox = static_cast<int>(m % Index(d.out_w));
    const Index rest = m / Index(d.out_w);
    const int oy = static_cast<int>(rest % Index(d.out_h));
    const size_t img = rest / Index(d.out_h);
#pragma unroll
    for (int k = 0; k < kConv2dDirectMaxTaps; ++k) {
      if (k >= taps) break;
      const int ci = k % d.c_in, kx = (k / d.c_in) % d.kw, ky = k / (d.c_in * d.kw);
      const int iy = oy * d.stride - d.pad_h + ky, ix = ox * d.stride - d.pad_w + kx;
      if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
        acc[k] += operand<kBf16>(x[((img * d.h + iy) * d.w + ix) * d.c_in + ci]) * grad;
    }
    acc[kConv2dDirectMaxTaps] += dy[size_t(m) * c_out + co];  // the bias sums the fp32 dy
  }
  write_block_partials(acc, taps, c_out, part);
}

void require_direct(const Conv2dShape& s, const char* who) {
  if (!conv2d_direct_supported(s))
    throw std::invalid_argument(
        std::string(who) + ": " + std::to_string(s.kh * s.kw * s.c_in) + " taps per output and " +
        std::to_string(s.c_out) + " output channels; the direct kernels take at most " +
        std::to_string(kConv2dDirectMaxTaps) + " and " + std::to_string(kConv2dDirectMaxOut));
}

}  // namespace

void conv2d_forward_direct_cuda(const Conv2dShape& s, const float* x, const float* w,
                                const float* b, float* y, bool bf16, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_forward_direct_cuda");
  require_direct(s, "conv2d_forward_direct_cuda");
  if (g.rows == 0) return;
  const size_t total = g.rows * static_cast<size_t>(s.c_out);
  const ConvDims d = dims_of(s, g);
  const unsigned grid = cuda::grid_for(total);
  // The loop's last index plus its stride must not wrap around in 32 bits.
  const bool narrow = total + size_t(grid) * cuda::kThreads <= UINT32_MAX;
  dispatch(bf16, narrow, [&](auto b16, auto index) {
    using Index = decltype(index);
    direct_forward_kernel<decltype(b16)::value, Index><<<grid, cuda::kThreads, 0, stream>>>(
        d, s.c_out, x, w, b, y, s.relu, static_cast<Index>(total));
  });
  LS_CHECK_LAUNCH("direct_forward_kernel");
}

void conv2d_filter_direct_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                               float* db, float* workspace, bool bf16, cudaStream_t stream) {
  const Conv2dGeometry g = conv2d_geometry(s, "conv2d_filter_direct_cuda");
  require_direct(s, "conv2d_filter_direct_cuda");
  if (g.rows == 0 || (dw == nullptr && db == nullptr)) return;
  const int taps = s.kh * s.kw * s.c_in;
  const int blocks = static_cast<int>(conv2d_direct_blocks(s));
  const size_t chunk = (g.rows + blocks - 1) / blocks;
  const int groups = std::max(1, cuda::kThreads / s.c_out);
  const int threads = groups * s.c_out;
  const size_t shared = size_t(groups) * (taps + 1) * s.c_out * sizeof(float);
  const ConvDims d = dims_of(s, g);
  // 32-bit row indices where the rows allow (as the forward pass); the same sums.
  const bool narrow = g.rows + chunk + size_t(threads) <= UINT32_MAX;  // no index wraps around
  dispatch(bf16, narrow, [&](auto b16, auto index) {
    using Index = decltype(index);
    direct_filter_partial_kernel<decltype(b16)::value, Index><<<blocks, threads, shared, stream>>>(
        d, s.c_out, x, dy, workspace, static_cast<Index>(g.rows), static_cast<Index>(chunk));
  });
  LS_CHECK_LAUNCH("direct_filter_partial_kernel");
  const size_t width = size_t(taps + 1) * s.c_out;
  direct::filter_sum_kernel<><<<cuda::grid_for(width), cuda::kThreads, 0, stream>>>(
      workspace, blocks, taps, s.c_out, dw, db);
  LS_CHECK_LAUNCH("filter_sum_kernel");
}

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
  auto* dy16 =
      reinterpret_cast<uint16_t*>(workspace + conv2d_bf16_workspace_floats(s) - (dy_count + 1) / 2);
  if (dw != nullptr || dx != nullptr) cast_f32_to_bf16_cuda(dy, dy16, dy_count, stream);
  if (dw != nullptr) {
    auto* col16 = reinterpret_cast<uint16_t*>(workspace);
    im2col(d, g, x, col16, stream);
    gemm_bf16_cuda({.m = cols, .n = s.c_out, .k = rows, .trans_a = true, .beta = 1.0f}, col16, dy16,
                   dw, stream);
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
