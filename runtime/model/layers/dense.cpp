#include "runtime/model/layers/dense.h"

#include "kernels/onednn/onednn.h"

namespace lockstep {
namespace {

class DenseLayer : public Layer {
 public:
  DenseLayer(const LayerPlan& plan, bool onednn) : Layer(plan), onednn_(onednn) {}
  void forward(int batch, const float* x, float* y, float*) override {
    if (onednn_)
      kernels::dense_forward_onednn(shape(batch), x, params_, bias(params_), y);
    else
      kernels::dense_forward_cpu(shape(batch), x, params_, bias(params_), y);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float*) override {
    if (onednn_)
      kernels::dense_backward_onednn(shape(batch), x, params_, dy, dx, grads_, bias(grads_));
    else
      kernels::dense_backward_cpu(shape(batch), x, params_, dy, dx, grads_, bias(grads_));
  }

 private:
  bool onednn_;
  kernels::DenseShape shape(int batch) const { return dense_shape(plan_, batch); }
  float* bias(float* base) const { return base + bias_offset(plan_); }
};

}  // namespace

LayerType dense_layer_type() {
  LayerType t;
  t.name = "dense";
  t.syntax = "dense[:units]";
  t.parse = [](const LayerToken& tok) {
    tok.expect_args(0, 1);
    return std::vector<int>{tok.args().empty() ? 0 : tok.positive("units", tok.args()[0])};
  };
  t.format = [](const LayerSpec& s) {
    return s.args[0] ? "dense:" + std::to_string(s.args[0]) : std::string("dense");
  };
  t.plan = [](LayerPlan& p, const LayerCheck& check) {
    const int out = p.spec.args[0] ? p.spec.args[0] : check.outputs;
    p.out = {out};
    p.params = shape_size(p.in) * static_cast<size_t>(out) + static_cast<size_t>(out);
  };
  t.init = [](const LayerPlan& p, float* host, std::mt19937_64& gen) {
    const size_t in = shape_size(p.in), out = shape_size(p.out);
    init_weights_and_bias(host, in * out, out, in, gen);
  };
  t.tensors = [](const LayerPlan& p) {
    const int64_t out = p.out.back();
    return std::vector<LayerTensor>{{"weight", {static_cast<int64_t>(shape_size(p.in)), out}},
                                    {"bias", {out}}};
  };
  t.make_cpu = [](const LayerPlan& p, CpuKernels k) -> std::unique_ptr<Layer> {
    return std::make_unique<DenseLayer>(p, k == CpuKernels::best && kernels::onednn_built());
  };
  t.make_cuda = make_dense_cuda;
  t.forward_flops = [](const LayerPlan& p) {
    return 2.0 * static_cast<double>(shape_size(p.in)) * static_cast<double>(shape_size(p.out));
  };
  return t;
}

}  // namespace lockstep
