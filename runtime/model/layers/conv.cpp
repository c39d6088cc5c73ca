#include "runtime/model/layers/conv.h"

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/conv/conv_pool.h"
#include "kernels/conv/winograd.h"
#include "kernels/onednn/onednn.h"
#include "runtime/base/error.h"
#include "runtime/model/model_spec.h"

namespace lockstep {
namespace {

// LOCKSTEP_CPU_CONV: "auto" (the default: Lockstep's Winograd kernels, kernels/conv/winograd.h, for
// a 3x3 convolution of 16k channels on blocked activations of small images on an AVX-512 CPU,
// winograd_preferred; elsewhere oneDNN chooses the algorithm, Winograd too where the activations
// are blocked), "onednn" (oneDNN's choice everywhere) or "direct" (oneDNN's direct algorithm
// always, as PyTorch asks oneDNN for: its rounding, about 1e-6 of the largest output apart from
// either Winograd).
// Read once, with the other knobs (runtime/base/knobs.h).
using CpuConv = CpuConvKnob;
CpuConv cpu_conv() { return configured_knobs().cpu_conv; }

// With oneDNN, the forward pass runs on it; so does the backward pass unless oneDNN runs AVX2 (not
// AVX-512) kernels and the layer has fewer input channels than those block them by (8): there it
// pads the channels and its backward passes ran 3-4x slower than im2col + sgemm (the CNN's first
// layer, 64 x 28x28x1 -> 32: 13.5 ms against 4.5 ms for the weight gradient, one thread, AMD EPYC
// VM, 2026-11-23), so those stay on OpenBLAS. With AVX-512 oneDNN is the faster one there too (the
// CNN at 1 rank x 2 threads 1.26x faster, at 2 ranks 1.13x, Intel Xeon VM, 2026-11-26). oneDNN's
// scratch belongs to its cached primitives (onednn.h); the OpenBLAS passes take the workspace.
constexpr int kOnednnBackwardMinChannels = 8;
bool onednn_backward_suits(const LayerPlan& p) {
  return p.in[2] >= kOnednnBackwardMinChannels || kernels::onednn_avx512();
}

// The CPU layer's shape, with its fused ReLU, and its oneDNN activation layouts
// (LayerPlan::in_blocked16 / out_blocked16; the algorithm chosen by LOCKSTEP_CPU_CONV).
kernels::Conv2dShape conv2d_cpu_shape(const LayerPlan& p, int batch) {
  kernels::Conv2dShape s = conv2d_shape(p, batch);
  s.relu = p.fused_relu;
  return s;
}

kernels::Conv2dIo conv2d_io(const LayerPlan& p) {
  return {p.in_blocked16, p.out_blocked16, cpu_conv() == CpuConv::direct};
}

// Whether the CPU layer (oneDNN, CpuKernels::best) runs with the blocked activations its plan asks
// for without reordering them: oneDNN chooses those layouts itself, at batch 1 and max_batch. The
// conv type's hands_on_blocked16 and takes_blocked16 hooks.
bool conv2d_keeps_blocked16(const LayerPlan& p, int max_batch) {
  // Both passes must run on oneDNN for the blocked activations to reach it.
  if (!kernels::onednn_built() || !onednn_backward_suits(p)) return false;
  for (int n : {1, max_batch})
    if (!kernels::conv2d_onednn_blocked16(conv2d_cpu_shape(p, n), conv2d_io(p))) return false;
  return true;
}

// The layout of the convolution's own output: a fused pool's input's (the layer's output is then
// the pool's), else the layer's.
bool conv_out_blocked16(const LayerPlan& p) {
  return p.fused_next.empty() ? p.out_blocked16 : p.fused_next.front().in_blocked16;
}

// The activations Lockstep's Winograd takes a layer on: blocked on both sides (oneDNN chose
// 16-channel blocks: AVX-512), or NHWC on both sides where the CPU has no AVX-512 (oneDNN's AVX2
// kernels block by 8 channels, so the plan keeps NHWC there, and oneDNN has no Winograd for AVX2).
bool winograd_layouts(const LayerPlan& p) {
  if (p.in_blocked16 != conv_out_blocked16(p)) return false;
  return p.in_blocked16 || kernels::winograd_on_nhwc();
}

// Whether the layer of the best CPU kernels runs on Lockstep's Winograd: oneDNN built and suited
// to both passes (the other kernel families of the set), the layouts above, LOCKSTEP_CPU_CONV
// automatic, and a shape winograd_preferred.
bool takes_winograd(const LayerPlan& p) {
  return kernels::onednn_built() && onednn_backward_suits(p) && winograd_layouts(p) &&
         cpu_conv() == CpuConv::automatic && kernels::winograd_preferred(conv2d_cpu_shape(p, 1));
}

// The algorithm of each pass is chosen once, here, from the plan and the build (member pointers to
// one function per algorithm): a step makes no choice. In order of precedence: a fused max-pool
// (every pass in kernels/conv/conv_pool.h); Lockstep's Winograd (both passes, on blocked
// activations, or NHWC ones on AVX2: winograd_layouts, where winograd_preferred); oneDNN; OpenBLAS
// (the backward pass alone where oneDNN does not suit it, onednn_backward_suits).
class Conv2dLayer : public Layer {
 public:
  Conv2dLayer(const LayerPlan& plan, bool onednn) : Layer(plan), pool_(fused_pool(plan)) {
    const bool onednn_backward = onednn && onednn_backward_suits(plan);
    blas_workspace_ = !(onednn && onednn_backward);
    if (onednn) io_ = conv2d_io(plan);
    const bool winograd = onednn && takes_winograd(plan);
    if (pool_.k > 0 && winograd) {
      forward_ = &Conv2dLayer::forward_winograd_pool;
      backward_ = &Conv2dLayer::backward_winograd_pool;
    } else if (pool_.k > 0) {
      forward_ = &Conv2dLayer::forward_conv_pool;
      backward_ = &Conv2dLayer::backward_conv_pool;
    } else if (winograd) {
      forward_ = &Conv2dLayer::forward_winograd;
      backward_ = &Conv2dLayer::backward_winograd;
    } else {
      forward_ = onednn ? &Conv2dLayer::forward_onednn : &Conv2dLayer::forward_blas;
      backward_ = onednn_backward ? &Conv2dLayer::backward_onednn : &Conv2dLayer::backward_blas;
    }
  }
  // The OpenBLAS passes' im2col matrix, then, with a fused ReLU, the gradient before it; with a
  // fused pool, the per-image partial gradients.
  size_t workspace_floats(int batch) const override {
    if (pool_.k > 0 && forward_ == &Conv2dLayer::forward_winograd_pool) return 0;  // per thread
    if (pool_.k > 0) return kernels::conv_pool_scratch_floats(pool_shape(batch));
    return blas_workspace(batch) + (plan_.fused_relu ? static_cast<size_t>(batch) * out_size() : 0);
  }
  void reserve(int max_batch) override {
    if (pool_.k == 0) return;
    const kernels::ConvPoolShape s = pool_shape(max_batch);
    argmax_.resize(static_cast<size_t>(max_batch) * s.out_h() * s.out_w() * s.conv.c_out);
  }
  void forward(int batch, const float* x, float* y, float* workspace) override {
    (this->*forward_)(batch, x, y, workspace);
  }
  void backward(int batch, const float* x, const float* y, const float* dy, float* dx,
                float* workspace) override {
    if (plan_.fused_relu) {
      // dy is the gradient after the fused ReLU: zero it where the ReLU blocked (y = 0). (Never
      // with a fused pool: the first convolution fuses one or the other.)
      float* masked = workspace + blas_workspace(batch);
      kernels::relu_backward_cpu(y, dy, masked, static_cast<size_t>(batch) * out_size());
      dy = masked;
    }
    (this->*backward_)(batch, x, dy, dx, workspace);
  }

 private:
  using Forward = void (Conv2dLayer::*)(int, const float*, float*, float*);
  using Backward = void (Conv2dLayer::*)(int, const float*, const float*, float*, float*);

  void forward_conv_pool(int batch, const float* x, float* y, float*) {
    kernels::conv_pool_forward_cpu(pool_shape(batch), x, params_, bias(params_), y, argmax_.data());
  }
  void backward_conv_pool(int batch, const float* x, const float* dy, float* dx, float* workspace) {
    if (dx != nullptr) throw Error("conv: a fused max-pool is only planned for a first layer");
    kernels::conv_pool_backward_cpu(pool_shape(batch), x, dy, argmax_.data(), grads_, bias(grads_),
                                    workspace);
  }
  // A fused 2x2 pool on Winograd (any layer: the input gradient too); the convolution's own
  // output keeps the input's layout, the pooled one the layer's.
  void forward_winograd_pool(int batch, const float* x, float* y, float*) {
    kernels::winograd_pool_forward_cpu(shape(batch), x, params_, bias(params_), y, argmax_.data(),
                                       pool_.relu, plan_.in_blocked16, plan_.out_blocked16);
  }
  void backward_winograd_pool(int batch, const float* x, const float* dy, float* dx, float*) {
    kernels::winograd_pool_backward_cpu(shape(batch), x, params_, dy, argmax_.data(), dx, grads_,
                                        bias(grads_), plan_.in_blocked16, plan_.out_blocked16);
  }
  void forward_winograd(int batch, const float* x, float* y, float*) {
    kernels::winograd_forward_cpu(shape(batch), x, params_, bias(params_), y, plan_.in_blocked16);
  }
  void backward_winograd(int batch, const float* x, const float* dy, float* dx, float*) {
    kernels::winograd_backward_cpu(shape(batch), x, params_, dy, dx, grads_, bias(grads_),
                                   plan_.in_blocked16);
  }
  void forward_onednn(int batch, const float* x, float* y, float*) {
    kernels::conv2d_forward_onednn(shape(batch), x, params_, bias(params_), y, io_);
  }
  void backward_onednn(int batch, const float* x, const float* dy, float* dx, float*) {
    kernels::conv2d_backward_onednn(shape(batch), x, params_, dy, dx, grads_, bias(grads_), io_);
  }
  void forward_blas(int batch, const float* x, float* y, float* workspace) {
    kernels::conv2d_forward_cpu(shape(batch), x, params_, bias(params_), y, workspace);
  }
  void backward_blas(int batch, const float* x, const float* dy, float* dx, float* workspace) {
    kernels::conv2d_backward_cpu(shape(batch), x, params_, dy, dx, grads_, bias(grads_), workspace);
  }

  float* bias(float* base) const { return base + bias_offset(plan_); }
  kernels::Conv2dShape shape(int batch) const { return conv2d_cpu_shape(plan_, batch); }
  kernels::ConvPoolShape pool_shape(int batch) const {
    return {shape(batch), pool_.k, pool_.relu, plan_.out_blocked16};
  }
  size_t blas_workspace(int batch) const {
    return blas_workspace_ ? kernels::conv2d_workspace_floats(shape(batch)) : 0;
  }

  FusedPool pool_;
  bool blas_workspace_ = false;  // a pass runs on OpenBLAS, which takes its im2col matrix there
  kernels::Conv2dIo io_;         // oneDNN's activation layouts (and LOCKSTEP_CPU_CONV=direct)
  Forward forward_ = nullptr;
  Backward backward_ = nullptr;
  std::vector<int8_t> argmax_;  // with a fused pool: the forward's window positions
};

}  // namespace

LayerType conv_layer_type() {
  LayerType t;
  t.name = "conv";
  t.syntax = "convKxK:channels[:stride]";
  t.name_takes_suffix = true;
  t.span_name = "conv2d";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(1, 2);
    std::vector<std::string> k = split_spec(tok.suffix(), 'x');
    if (k.size() != 2) tok.fail("'" + tok.token() + "': write the kernel as convKxK, e.g. conv3x3");
    const int kh = tok.positive("the kernel size", k[0]);
    const int kw = tok.positive("the kernel size", k[1]);
    if (kh != kw) tok.fail("'" + tok.token() + "': only square kernels are supported");
    const int channels = tok.positive("channels", tok.args()[0]);
    const int stride = tok.args().size() == 2 ? tok.positive("the stride", tok.args()[1]) : 1;
    return std::vector<int>{kh, channels, stride};
  };
  t.format = [](const LayerSpec& s) {
    const std::string k = std::to_string(s.args[0]);
    const std::string text = "conv" + k + "x" + k + ":" + std::to_string(s.args[1]);
    return s.args[2] == 1 ? text : text + ":" + std::to_string(s.args[2]);
  };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    check.need_image(p.in);
    const SampleShape& in = p.in;
    const int k = p.spec.args[0], channels = p.spec.args[1], s = p.spec.args[2], pad = k / 2;
    const int oh = (in[0] + 2 * pad - k) / s + 1, ow = (in[1] + 2 * pad - k) / s + 1;
    if (in[0] + 2 * pad < k || in[1] + 2 * pad < k || oh <= 0 || ow <= 0)
      check.fail(": the kernel is larger than its input " + to_string(in));
    p.out = {oh, ow, channels};
    p.params = static_cast<size_t>(k) * k * in[2] * channels + channels;
  };
  t.init = [](const LayerPlan& p, float* host, std::mt19937_64& gen) {
    const size_t k = static_cast<size_t>(p.spec.args[0]);
    const size_t fan_in = k * k * static_cast<size_t>(p.in[2]);
    const size_t out = static_cast<size_t>(p.spec.args[1]);
    init_weights_and_bias(host, fan_in * out, out, fan_in, gen);
  };
  t.tensors = [](const LayerPlan& p) {
    const int64_t k = p.spec.args[0], out = p.out.back();
    return std::vector<LayerTensor>{{"weight", {k, k, p.in[2], out}}, {"bias", {out}}};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels k) -> std::unique_ptr<Layer> {
    return std::make_unique<Conv2dLayer>(p, k == CpuKernels::best && kernels::onednn_built());
  };
  t.make_cuda = make_conv_cuda;
  // Plan hooks (cpu_plan.h). A ReLU after it runs in its own pass on either kernel set (a oneDNN
  // post-op, or the OpenBLAS twin's bias pass): no extra pass over its output, and its backward
  // pass masks the incoming gradient. (A ReLU before a max-pool has moved after it by then, where
  // it runs on a quarter of the values: cheaper than fusing it here.)
  t.fuses_activation = [](const LayerPlan&, Activation a) { return a == Activation::relu; };
  // The activations between convolutions and max-pools stay in oneDNN's 16-channel blocks where
  // its convolutions choose that layout themselves (AVX-512, channels a multiple of 16; a
  // one-channel first layer's output too): every reorder to and from NHWC is spared (the first
  // convolution's two were 0.47 + 0.72 ms of a 13.7 ms step at batch 64 a rank, AVX-512 VM,
  // 2026-11-26), and with blocked activations on both sides oneDNN, or our Winograd, may take
  // a 3x3 convolution.
  t.hands_on_blocked16 = conv2d_keeps_blocked16;
  t.takes_blocked16 = conv2d_keeps_blocked16;
  // A first convolution over one input channel and the max-pool after it run as one
  // kernel (kernels/conv/conv_pool.h: the convolution's full-resolution output, 64 x 28x28x32
  // floats a rank-step in the CNN, is never written), the pool's fused ReLU with them. The kernel
  // computes no input gradient, hence `first`; a convolution that fused a ReLU itself keeps it.
  // Any convolution on Lockstep's Winograd runs a 2x2 max-pool after it (and the pool's ReLU) in
  // its output transform, each 4x4 tile's four windows while the tile is in registers, and expands
  // the pooled gradient per image in its backward passes (kernels/conv/winograd.h): the full-size
  // output and its gradient are never written, the pool's two passes are spared.
  t.fuses_next = [](const LayerPlan& p, const LayerPlan& next, bool first) {
    if (p.fused_relu) return false;
    const LayerType& next_type = find_layer_type(next.spec.type);
    const int k = next_type.max_pool_window ? next_type.max_pool_window(next) : 0;
    if (k == 0) return false;
    if (first && kernels::conv_pool_fast() &&
        kernels::conv_pool_supported(conv2d_cpu_shape(p, 1), k))
      return true;
    return k == 2 && takes_winograd(p);
  };
  // CUDA, with LOCKSTEP_CUDA_CONV_POOL=fused: a first convolution over one input channel, the
  // max-pool after it and a ReLU after that as one pair of kernels (conv_pool_*_cuda), the full-
  // resolution output (103 MB at batch 1024 in the CNN) and its gradient never written.
  t.fuses_next_cuda = [](const LayerPlan& p, const LayerPlan& next, bool first) {
    const LayerType& next_type = find_layer_type(next.spec.type);
    const int k = next_type.max_pool_window ? next_type.max_pool_window(next) : 0;
    return first && k > 0 && kernels::conv_pool_cuda_supported(conv2d_shape(p, 1), k);
  };
  t.forward_flops = [](const LayerPlan& p) {
    const double k = p.spec.args[0];
    return 2.0 * p.out[0] * p.out[1] * p.out[2] * k * k * p.in.back();
  };
  // The im2col matrix of one sample.
  t.scratch_floats = [](const LayerPlan& p) {
    return static_cast<double>(p.spec.args[0]) * p.spec.args[0] * p.in[2] * p.out[0] * p.out[1];
  };
  return t;
}

}  // namespace lockstep
