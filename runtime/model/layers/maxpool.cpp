#include "runtime/model/layers/maxpool.h"

#include <cstdint>

namespace lockstep {
namespace {

// NHWC, or oneDNN's 16-channel blocks (LayerPlan::in_blocked16, cpu_plan.h), chosen once here.
class MaxPoolLayer : public Layer {
 public:
  explicit MaxPoolLayer(const LayerPlan& plan)
      : Layer(plan),
        forward_(plan.in_blocked16 ? &MaxPoolLayer::forward_blocked16
                                   : &MaxPoolLayer::forward_nhwc),
        backward_(plan.in_blocked16 ? &MaxPoolLayer::backward_blocked16
                                    : &MaxPoolLayer::backward_nhwc) {}
  void reserve(int max_batch) override {
    argmax_.resize(static_cast<size_t>(max_batch) * out_size());
  }
  void forward(int batch, const float* x, float* y, float*) override {
    (this->*forward_)(shape(batch), x, y);
  }
  void backward(int batch, const float*, const float*, const float* dy, float* dx,
                float*) override {
    if (dx) (this->*backward_)(shape(batch), dy, dx);
  }

 private:
  void forward_nhwc(const kernels::PoolShape& s, const float* x, float* y) {
    kernels::maxpool_forward_cpu(s, x, y, argmax_.data(), plan_.fused_relu);
  }
  void forward_blocked16(const kernels::PoolShape& s, const float* x, float* y) {
    kernels::maxpool_forward_blocked16_cpu(s, x, y, argmax_.data(), plan_.out_blocked16,
                                           plan_.fused_relu);
  }
  void backward_nhwc(const kernels::PoolShape& s, const float* dy, float* dx) {
    kernels::maxpool_backward_cpu(s, dy, argmax_.data(), dx);
  }
  void backward_blocked16(const kernels::PoolShape& s, const float* dy, float* dx) {
    kernels::maxpool_backward_blocked16_cpu(s, dy, argmax_.data(), dx, plan_.out_blocked16);
  }

  kernels::PoolShape shape(int batch) const { return pool_shape(plan_, batch); }
  void (MaxPoolLayer::*forward_)(const kernels::PoolShape&, const float*, float*);
  void (MaxPoolLayer::*backward_)(const kernels::PoolShape&, const float*, float*);
  std::vector<int32_t> argmax_;
};

}  // namespace

LayerType maxpool_layer_type() {
  LayerType t;
  t.name = "maxpool";
  t.syntax = "maxpoolK";
  t.name_takes_suffix = true;
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(0, 0);
    return std::vector<int>{tok.positive("the pool size", tok.suffix())};
  };
  t.format = [](const LayerSpec& s) { return "maxpool" + std::to_string(s.args[0]); };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    check.need_image(p.in);
    const int k = p.spec.args[0];
    if (p.in[0] < k || p.in[1] < k)
      check.fail(": the window is larger than its input " + to_string(p.in));
    p.out = {p.in[0] / k, p.in[1] / k, p.in[2]};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels) -> std::unique_ptr<Layer> {
    return std::make_unique<MaxPoolLayer>(p);
  };
  // Plan hooks (cpu_plan.h). Max commutes with a non-decreasing function, and so do their
  // gradients (the window's maximum is where the gradient goes either way, blocked where that
  // maximum is not positive): a ReLU before the pool runs after it, over 1/K^2 of the values, and
  // a full-size pass is saved forward and backward.
  t.max_pool_window = [](const LayerPlan& p) { return p.spec.args[0]; };
  t.commutes_with = [](const LayerPlan&, Activation a) { return a == Activation::relu; };
  // The pool applies the ReLU after it as it writes each window's maximum (no gradient where the
  // result is 0), on either layout: a pass over its output less forward and backward (the CNN's
  // two ReLUs, 0.42 ms of a 10.5 ms step at batch 64 a rank, blocked).
  t.fuses_activation = [](const LayerPlan&, Activation a) { return a == Activation::relu; };
  // It reads blocks of 16 channels, and writes them only when it read them (the blocked kernel
  // writes either layout; the NHWC one only NHWC).
  t.takes_blocked16 = [](const LayerPlan& p, int) { return p.in[2] % 16 == 0; };
  t.hands_on_blocked16 = [](const LayerPlan& p, int) { return p.in_blocked16; };
  t.make_cuda = make_maxpool_cuda;
  return t;
}

}  // namespace lockstep
