#include "runtime/model/layers/relu.h"

#include "kernels/activation.h"

namespace lockstep {
namespace {

class ReluLayer : public Layer {
 public:
  using Layer::Layer;
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::relu_forward_cpu(x, y, static_cast<size_t>(batch) * out_size());
  }
  void backward(int batch, const float*, const float* y, const float* dy, float* dx,
                float*) override {
    if (dx) kernels::relu_backward_cpu(y, dy, dx, static_cast<size_t>(batch) * out_size());
  }
};

}  // namespace

LayerType relu_layer_type() {
  LayerType t;
  t.name = "relu";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(0, 0);
    return std::vector<int>{};
  };
  t.format = [](const LayerSpec&) { return std::string("relu"); };
  t.plan = [](LayerPlan& p, const LayerCheck&) { p.out = p.in; };
  t.make_cpu = [](const LayerPlan& p, CpuKernels) -> std::unique_ptr<Layer> {
    return std::make_unique<ReluLayer>(p);
  };
  t.make_cuda = make_relu_cuda;
  // Plan hooks (cpu_plan.h): the layer before it may apply it (a convolution, a blocked max-pool),
  // a max-pool after it may run first, and it is elementwise, so blocked activations pass through.
  t.activation = Activation::relu;
  t.layout_agnostic = true;
  return t;
}

}  // namespace lockstep
