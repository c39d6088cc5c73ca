// 2-D convolution, NHWC activations, HWIO weights (w[kh][kw][c_in][c_out]), bias[c_out], any kernel
// size, stride and zero padding. Forward overwrites y[n, out_h, out_w, c_out]. Backward: dx
// overwritten (skipped when null), dw and db accumulated (+=). `workspace` is scratch of at least
// conv2d_workspace_floats(s) floats (im2col buffer), owned by the caller so steps do not allocate.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels {

struct Conv2dShape {
  int n = 0, h = 0, w = 0, c_in = 0, c_out = 0;
  int kh = 3, kw = 3, stride = 1, pad_h = 1, pad_w = 1;
  // Forward only: y = max(0, conv + b), a ReLU fused into the pass (oneDNN: an eltwise post-op;
  // the other twins: one pass over y after the product). Backward ignores it: its dy is the
  // gradient before the ReLU.
  bool relu = false;
  int out_h() const { return (h + 2 * pad_h - kh) / stride + 1; }
  int out_w() const { return (w + 2 * pad_w - kw) / stride + 1; }
};

// The im2col matrix of a shape: M = n * out_h * out_w rows, K = kh * kw * c_in columns. Checks the
// shape first (both twins call it): throws std::invalid_argument naming `who` and the problem.
struct Conv2dGeometry {
  int out_h = 0, out_w = 0;
  size_t rows = 0, cols = 0;
};
Conv2dGeometry conv2d_geometry(const Conv2dShape& s, const char* who);

size_t conv2d_workspace_floats(const Conv2dShape& s);
void conv2d_forward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* b,
                        float* y, float* workspace);
void conv2d_backward_cpu(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db, float* workspace);

// oneDNN twins (conv2d_onednn.cpp; onednn.h: availability, threads, the per-thread primitive
// cache): the same shapes and contract, on the same NHWC / HWIO buffers unless `io` says an
// activation is in oneDNN's 16-channel blocks (below); their scratch (reordered operands,
// oneDNN's scratchpad) is the cached primitives' own, so they take no workspace.
//
// The algorithm is oneDNN's to choose (convolution_auto) wherever the activations' layouts are
// too: on AVX-512 it takes Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions of 16k channels at
// batches of 16 or more (its own heuristic), which does the CNN's second convolution in 0.80x the
// direct kernel's time and rounds differently (about 1e-6 of the largest output). `io.direct`
// pins the direct algorithm (LOCKSTEP_CPU_CONV=direct in the layers).
struct Conv2dIo {
  // x (and dx) / y (and dy) laid out in 16-channel blocks, oneDNN's aBcd16b ("nChw16c":
  // v[n][c / 16][h][w][c % 16]); the channels a multiple of 16, so the buffer holds as many
  // floats as NHWC. Correct for any shape (a reorder where the primitive wants another layout);
  // fast where conv2d_onednn_blocked16 says oneDNN chose that layout itself.
  bool x_blocked16 = false;
  bool y_blocked16 = false;
  bool direct = false;
};
void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* b,
                           float* y, Conv2dIo io = {});
void conv2d_backward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                            float* dx, float* dw, float* db, Conv2dIo io = {});

// Whether oneDNN, left to choose the activations' layouts for this shape (every pass it would
// run: forward, the weight gradient, and with more than one input channel the input gradient),
// chooses the 16-channel blocks for the input (`io.x_blocked16` asks about x; a one-channel
// input is never blocked) and the output (`io.y_blocked16`): on AVX-512 it does for 16k channels.
// A layer that reads or writes that layout itself (the max-pool, pool.h; ReLUs) spares the
// reorders to and from NHWC around each pass.
bool conv2d_onednn_blocked16(const Conv2dShape& s, Conv2dIo io);

// CUDA twins (conv2d.cu: im2col + cuBLAS): device pointers, a device workspace of the same size,
// enqueued on `stream`.
void conv2d_forward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* b,
                         float* y, float* workspace, cudaStream_t stream);
void conv2d_backward_cuda(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                          float* dx, float* dw, float* db, float* workspace, cudaStream_t stream);

// bf16 compute (conv2d.cu): im2col writes the column matrix in bf16 straight from the fp32 input
// (no separate cast pass), the GEMMs take bf16 operands and accumulate in fp32; y, dx, dw, db and
// the bias stay fp32. w16 is the caller's bf16 copy of w (cast_f32_to_bf16_cuda), current whenever
// w changes. The workspace holds conv2d_bf16_workspace_floats(s) floats: the column matrix (bf16,
// then the fp32 dcol of the backward pass in the same place) and a bf16 copy of dy.
size_t conv2d_bf16_workspace_floats(const Conv2dShape& s);
void conv2d_forward_bf16_cuda(const Conv2dShape& s, const float* x, const uint16_t* w16,
                              const float* b, float* y, float* workspace, cudaStream_t stream);
void conv2d_backward_bf16_cuda(const Conv2dShape& s, const float* x, const uint16_t* w16,
                               const float* dy, float* dx, float* dw, float* db, float* workspace,
                               cudaStream_t stream);

// Direct CUDA kernels (conv2d.cu) for a layer with few taps per output, such as a first layer on
// images (conv2d_direct_supported: kh * kw * c_in <= 32, c_out <= 256), where im2col's column
// matrix and a GEMM with K = kh * kw * c_in are mostly overhead: the forward pass reads the HWIO
// weights and writes y = conv + b (and the ReLU when s.relu) in one pass; the filter pass adds
// the filter and bias gradients (dw, db, both optional) in two passes with a fixed summation order
// (per-block partial sums in the workspace, conv2d_direct_workspace_floats(s) floats, then summed
// over the blocks in order). bf16: x, w and dy are rounded to bf16 where they are read, products
// accumulate in fp32 and every output stays fp32. No input-gradient pass.
constexpr int kConv2dDirectMaxTaps = 32;
constexpr int kConv2dDirectMaxOut = 256;
bool conv2d_direct_supported(const Conv2dShape& s);
size_t conv2d_direct_blocks(const Conv2dShape& s);  // the filter pass's blocks: fixed by the shape
size_t conv2d_direct_workspace_floats(const Conv2dShape& s);
void conv2d_forward_direct_cuda(const Conv2dShape& s, const float* x, const float* w,
                                const float* b, float* y, bool bf16, cudaStream_t stream);
void conv2d_filter_direct_cuda(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                               float* db, float* workspace, bool bf16, cudaStream_t stream);

// cuDNN twins (conv2d_cudnn.cu, in a build with cuDNN; conv2d_cudnn_stub.cpp throws without it):
// the same NHWC activations and contract, but the weights in cuDNN's filter order KRSC
// (wk[c_out][kh][kw][c_in], the transpose of HWIO's [K, c_out] matrix), a copy the caller makes
// with conv2d_weights_krsc_*_cuda whenever w changes; dw and db stay HWIO and fp32 and are
// accumulated (+=) as above. The workspace holds conv2d_cudnn_workspace_floats(s, bf16) floats:
// cuDNN's own (the larger of the im2col twin's column matrix and 64 MiB, so a workspace sized for
// a batch serves every smaller one) and the filter gradient in KRSC order. bf16: x and dy are
// cast to bf16 in the workspace, cuDNN computes in bf16 with fp32 accumulation, and its outputs
// (y before the bias, dx, dw before they are added) are bf16 words, widened to fp32 on the way
// out. Algorithms: cuDNN's fastest within the budget as it times them (cudnnFind*Ex) at the first
// call per (thread, device, shape), deterministic ones first (unless set_cudnn_deterministic_first
// said otherwise before that call), without TF32 in fp32. Which family is faster depends on the
// layer: the CUDA layer times both (conv_cuda.cu).
bool conv2d_cudnn_available();
// Process-wide, for start-up (runtime/base/knobs.h: LOCKSTEP_CUDNN_DETERMINISTIC): false takes
// cuDNN's time order alone, as PyTorch's cudnn.benchmark without its deterministic flag. Default
// true. Thread-safe; plans already made keep their algorithms. A no-op without cuDNN.
void set_cudnn_deterministic_first(bool first);
size_t conv2d_cudnn_workspace_floats(const Conv2dShape& s, bool bf16);
void conv2d_weights_krsc_cuda(const Conv2dShape& s, const float* w, float* wk, cudaStream_t stream);
void conv2d_weights_krsc_bf16_cuda(const Conv2dShape& s, const float* w, uint16_t* wk,
                                   cudaStream_t stream);
void conv2d_forward_cudnn(const Conv2dShape& s, const float* x, const float* wk, const float* b,
                          float* y, float* workspace, cudaStream_t stream);
void conv2d_backward_cudnn(const Conv2dShape& s, const float* x, const float* wk, const float* dy,
                           float* dx, float* dw, float* db, float* workspace, cudaStream_t stream);
void conv2d_forward_bf16_cudnn(const Conv2dShape& s, const float* x, const uint16_t* wk16,
                               const float* b, float* y, float* workspace, cudaStream_t stream);
void conv2d_backward_bf16_cudnn(const Conv2dShape& s, const float* x, const uint16_t* wk16,
                                const float* dy, float* dx, float* dw, float* db, float* workspace,
                                cudaStream_t stream);

}  // namespace lockstep::kernels
