// A first layer's convolution over one input channel and the max-pool after it, fused on the CPU
// (and, optionally, the ReLU after the pool): the full-resolution convolution output, the
// largest activation of a small CNN (64 x 28x28x32 floats a rank-step in the Fashion-MNIST CNN),
// is never written; each pooling window's k*k convolution outputs are computed in registers and
// only their maximum leaves. oneDNN has no pooling post-op, and its one-channel kernel spends its
// time writing that output (conv.h, docs/PERFORMANCE.md). The convolution: stride 1, zero padding
// K/2 each side for an odd K, weights HWIO (K x K x 1 x c_out) and a bias; the pool: k x k windows
// at stride k over the convolution's output, floor mode, the first maximum of a window winning a
// tie (as maxpool_forward_cpu). The CUDA twins below do the same on the device (the GPU layers
// take them with LOCKSTEP_CUDA_CONV_POOL=fused). Stateless functions: threads may call them on
// separate buffers.
// No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/conv/conv2d.h"

namespace lockstep::kernels {

struct ConvPoolShape {
  Conv2dShape conv;          // c_in 1, stride 1, kh == kw odd, pad kh / 2; c_out a multiple of 16
  int k = 2;                 // the pool's window and stride
  bool relu = false;         // y = max(0, window maximum), no gradient where that is 0
  bool y_blocked16 = false;  // y (and dy) in 16-channel blocks (aBcd16b), else NHWC
  int out_h() const { return conv.h / k; }
  int out_w() const { return conv.w / k; }
};

// Whether the fused kernels take a convolution shape (its batch aside) with a k x k pool.
bool conv_pool_supported(const Conv2dShape& conv, int k);
// Whether they run their AVX-512 or AVX2 build here, where they beat oneDNN's convolution and the
// max-pool (docs/PERFORMANCE.md, the fused first layer; on AVX2 also OpenBLAS's backward pass); the
// baseline build is slower than those, but as exact.
bool conv_pool_fast();

// y: n x out_h x out_w x c_out (NHWC or blocked); argmax, in y's order: the window position
// (dy * k + dx) each maximum came from, or -1 where the fused ReLU cut it. Throws
// std::invalid_argument (naming the kernel) for a shape conv_pool_supported refuses.
void conv_pool_forward_cpu(const ConvPoolShape& s, const float* x, const float* w, const float* b,
                           float* y, int8_t* argmax);

// The weight and bias gradients (accumulated, +=) from dy (y's layout) and the forward's argmax;
// no input gradient (a first layer's). `scratch` holds conv_pool_scratch_floats(s) floats: one
// partial sum per image, added in image order, so the result is the same bits at any thread count.
size_t conv_pool_scratch_floats(const ConvPoolShape& s);
void conv_pool_backward_cpu(const ConvPoolShape& s, const float* x, const float* dy,
                            const int8_t* argmax, float* dw, float* db, float* scratch);

// The CUDA twins (conv_pool.cu, of the direct kernels' kind: direct.cuh; conv_pool_stub.cpp throws
// without CUDA), on the stream: y NHWC only (s.y_blocked16 false), the shapes
// conv_pool_cuda_supported takes (those of conv_pool_supported with at most kConv2dDirectMaxTaps
// taps and kConv2dDirectMaxOut channels). Forward: a thread per pooled value, each window
// position's sum over the taps in order (fmaf), then the bias: the CPU kernels' order and, where
// those run with FMA (their AVX-512 and AVX2 builds), their bits. Backward: the filter and bias
// gradients added (+=) in two passes with a fixed order (per-block partial sums in `workspace`,
// conv_pool_cuda_workspace_floats(s) floats, then summed over the blocks in order): the same bits
// run after run, not the CPU's order. bf16: x, w and dy rounded to bf16 where they are read (the
// bias gradient sums the fp32 dy), products accumulated in fp32, every output fp32.
bool conv_pool_cuda_supported(const Conv2dShape& conv, int k);
size_t conv_pool_cuda_workspace_floats(const ConvPoolShape& s);
void conv_pool_forward_cuda(const ConvPoolShape& s, const float* x, const float* w, const float* b,
                            float* y, int8_t* argmax, bool bf16, cudaStream_t stream);
void conv_pool_backward_cuda(const ConvPoolShape& s, const float* x, const float* dy,
                             const int8_t* argmax, float* dw, float* db, float* workspace,
                             bool bf16, cudaStream_t stream);

}  // namespace lockstep::kernels
