// The CUDA twins of the fused first layer (conv_pool.h): a first convolution over one input
// channel, the max-pool after it and optionally a ReLU, in two passes of the direct family's kind
// (direct.cuh): a thread per pooled value forward; the filter and bias gradients in per-block
// partial sums, then the blocks' sums in order.
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/conv/conv_pool.h"
#include "kernels/conv/direct.cuh"

namespace lockstep::kernels {

namespace {

using direct::ConvDims;
using direct::dims_of;
using direct::dispatch;
using direct::operand;
using direct::write_block_partials;

// The first convolution over one input channel and the max-pool (and ReLU) after it
// (conv_pool.h): one thread per pooled output (img, py, px, co), consecutive threads consecutive
// channels of one pixel (the same inputs, broadcast; consecutive weights). Each window position's
// convolution output is its taps' products summed in order from 0 (fmaf), then the bias, as the
// CPU kernels sum it; the first maximum of the window keeps a tie; with `relu` a maximum not above
// 0 gives 0 (a NaN passes) and index -1.
template <bool kBf16, class Index>
__global__ void conv_pool_forward_kernel(ConvDims d, int c_out, int k, bool relu,
                                         const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ b, float* __restrict__ y,
                                         int8_t* __restrict__ argmax, Index total) {
  const int ph = d.out_h / k, pw = d.out_w / k;
  const Index stride = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int co = static_cast<int>(i % Index(c_out));
    const Index m = i / Index(c_out);
    const int px = static_cast<int>(m % Index(pw));
    const Index rest = m / Index(pw);
    const int py = static_cast<int>(rest % Index(ph));
    const float* image = x + size_t(rest / Index(ph)) * d.h * d.w;
    float best = 0.0f;
    int where = 0;
    for (int wy = 0; wy < k; ++wy) {
      for (int wx = 0; wx < k; ++wx) {
        const int oy = py * k + wy, ox = px * k + wx;
        float acc = 0.0f;
        for (int ky = 0; ky < d.kh; ++ky) {
          const int iy = oy - d.pad_h + ky;
          if (iy < 0 || iy >= d.h) continue;
          for (int kx = 0; kx < d.kw; ++kx) {
            const int ix = ox - d.pad_w + kx;
            if (ix < 0 || ix >= d.w) continue;
            acc = fmaf(operand<kBf16>(image[iy * d.w + ix]),
                       operand<kBf16>(w[(ky * d.kw + kx) * c_out + co]), acc);
          }
        }
        const float v = acc + b[co];
        const int q = wy * k + wx;
        if (q == 0 || v > best) {
          best = v;
          where = q;
        }
      }
    }
    if (relu) {
      if (!(best > 0.0f)) where = -1;
      best = best < 0.0f ? 0.0f : best;
    }
    y[i] = best;
    argmax[i] = static_cast<int8_t>(where);
  }
}

// Its filter pass's first half, as direct_filter_partial_kernel's over the pooled rows m = (img,
// py, px): a row's gradient reaches the one window position its argmax names (none where the
// fused ReLU cut it, -1), so it adds one product per tap there.
template <bool kBf16, class Index>
__global__ void conv_pool_filter_partial_kernel(ConvDims d, int c_out, int k,
                                                const float* __restrict__ x,
                                                const float* __restrict__ dy,
                                                const int8_t* __restrict__ argmax,
                                                float* __restrict__ part, Index rows, Index chunk) {
  const int taps = d.kh * d.kw, ph = d.out_h / k, pw = d.out_w / k;
  const int groups = blockDim.x / c_out;
  const int co = threadIdx.x % c_out, g = threadIdx.x / c_out;
  float acc[kConv2dDirectMaxTaps + 1];
#pragma unroll
  for (int t = 0; t <= kConv2dDirectMaxTaps; ++t) acc[t] = 0.0f;
  const Index first = Index(blockIdx.x) * chunk, last = min(rows, first + chunk);
  for (Index m = first + g; m < last; m += groups) {
    const size_t at = size_t(m) * c_out + co;
    const int q = argmax[at];
    if (q < 0) continue;
    const float raw = dy[at], grad = operand<kBf16>(raw);
    const int px = static_cast<int>(m % Index(pw));
    const Index rest = m / Index(pw);
    const int py = static_cast<int>(rest % Index(ph));
    const float* image = x + size_t(rest / Index(ph)) * d.h * d.w;
    const int oy = py * k + q / k - d.pad_h, ox = px * k + q % k - d.pad_w;
#pragma unroll
    for (int t = 0; t < kConv2dDirectMaxTaps; ++t) {
      if (t >= taps) break;
      const int iy = oy + t / d.kw, ix = ox + t % d.kw;
      if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
        acc[t] += operand<kBf16>(image[iy * d.w + ix]) * grad;
    }
    acc[kConv2dDirectMaxTaps] += raw;  // the bias sums the fp32 dy
  }
  write_block_partials(acc, taps, c_out, part);
}

Conv2dGeometry conv_pool_geometry(const ConvPoolShape& s, const char* who) {
  const Conv2dGeometry g = conv2d_geometry(s.conv, who);
  if (!conv_pool_cuda_supported(s.conv, s.k) || s.y_blocked16)
    throw std::invalid_argument(
        std::string(who) + ": needs one input channel, stride 1, an odd square kernel of at most " +
        std::to_string(kConv2dDirectMaxTaps) + " taps with padding K/2, 16 to " +
        std::to_string(kConv2dDirectMaxOut) +
        " output channels in multiples of 16, a pool window no larger than the image, and an "
        "NHWC output");
  return g;
}

}  // namespace

void conv_pool_forward_cuda(const ConvPoolShape& s, const float* x, const float* w, const float* b,
                            float* y, int8_t* argmax, bool bf16, cudaStream_t stream) {
  const Conv2dGeometry g = conv_pool_geometry(s, "conv_pool_forward_cuda");
  const size_t total = static_cast<size_t>(s.conv.n) * s.out_h() * s.out_w() * s.conv.c_out;
  if (total == 0) return;
  const ConvDims d = dims_of(s.conv, g);
  const unsigned grid = cuda::grid_for(total);
  const bool narrow = total + size_t(grid) * cuda::kThreads <= UINT32_MAX;
  dispatch(bf16, narrow, [&](auto b16, auto index) {
    using Index = decltype(index);
    conv_pool_forward_kernel<decltype(b16)::value, Index><<<grid, cuda::kThreads, 0, stream>>>(
        d, s.conv.c_out, s.k, s.relu, x, w, b, y, argmax, static_cast<Index>(total));
  });
  LS_CHECK_LAUNCH("conv_pool_forward_kernel");
}

void conv_pool_backward_cuda(const ConvPoolShape& s, const float* x, const float* dy,
                             const int8_t* argmax, float* dw, float* db, float* workspace,
                             bool bf16, cudaStream_t stream) {
  const Conv2dGeometry g = conv_pool_geometry(s, "conv_pool_backward_cuda");
  const size_t rows = static_cast<size_t>(s.conv.n) * s.out_h() * s.out_w();
  if (rows == 0 || (dw == nullptr && db == nullptr)) return;
  const int taps = s.conv.kh * s.conv.kw, c_out = s.conv.c_out;
  const size_t width = size_t(taps + 1) * c_out;
  const int blocks = static_cast<int>(conv_pool_cuda_workspace_floats(s) / width);
  const size_t chunk = (rows + blocks - 1) / blocks;
  const int groups = std::max(1, cuda::kThreads / c_out);
  const int threads = groups * c_out;
  const size_t shared = size_t(groups) * width * sizeof(float);
  const ConvDims d = dims_of(s.conv, g);
  const bool narrow = rows + chunk + size_t(threads) <= UINT32_MAX;  // no index wraps around
  dispatch(bf16, narrow, [&](auto b16, auto index) {
    using Index = decltype(index);
    conv_pool_filter_partial_kernel<decltype(b16)::value, Index>
        <<<blocks, threads, shared, stream>>>(d, c_out, s.k, x, dy, argmax, workspace,
                                              static_cast<Index>(rows), static_cast<Index>(chunk));
  });
  LS_CHECK_LAUNCH("conv_pool_filter_partial_kernel");
  direct::filter_sum_kernel<><<<cuda::grid_for(width), cuda::kThreads, 0, stream>>>(
      workspace, blocks, taps, c_out, dw, db);
  LS_CHECK_LAUNCH("filter_sum_kernel");
}

}  // namespace lockstep::kernels
