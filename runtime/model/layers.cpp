#include "runtime/model/layers.h"

#include <cmath>

#include "kernels/activation.h"
#include "kernels/conv2d.h"
#include "kernels/dense.h"
#include "kernels/onednn.h"
#include "kernels/pool.h"
#include "runtime/model/layer_shapes.h"

namespace lockstep {

void fill_uniform(float* p, size_t n, float bound, std::mt19937_64& gen) {
  constexpr float kScale = 1.0f / 16777216.0f;  // 2^-24
  for (size_t i = 0; i < n; ++i) {
    float u = static_cast<float>(gen() >> 40) * kScale;  // [0, 1)
    p[i] = (2.0f * u - 1.0f) * bound;
  }
}

namespace {

// PyTorch's default initialisation for Linear and Conv2d (Kaiming-uniform with a = sqrt(5)):
// weights and biases uniform in +-1/sqrt(fan_in). Matching it keeps published recipes comparable.
void init_weights_and_bias(float* params, size_t weights, size_t bias, size_t fan_in,
                           std::mt19937_64& gen) {
  float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  fill_uniform(params, weights, bound, gen);
  fill_uniform(params + weights, bias, bound, gen);
}

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

// With oneDNN, the forward pass runs on it; so does the backward pass unless the layer has fewer
// input channels than oneDNN's AVX2 kernels block them by (8): there it pads the channels and its
// backward passes ran 3-4x slower than im2col + sgemm (the CNN's first layer, 64 x 28x28x1 -> 32:
// 13.5 ms against 4.5 ms for the weight gradient, one thread), so those stay on OpenBLAS. oneDNN's
// scratch belongs to its cached primitives (onednn.h); the OpenBLAS passes take the workspace.
class Conv2dLayer : public Layer {
 public:
  static constexpr int kOnednnBackwardMinChannels = 8;
  Conv2dLayer(const LayerPlan& plan, bool onednn)
      : Layer(plan),
        onednn_forward_(onednn),
        onednn_backward_(onednn && plan.in[2] >= kOnednnBackwardMinChannels) {}
  size_t workspace_floats(int batch) const override {
    return onednn_forward_ && onednn_backward_ ? 0 : kernels::conv2d_workspace_floats(shape(batch));
  }
  void forward(int batch, const float* x, float* y, float* workspace) override {
    if (onednn_forward_)
      kernels::conv2d_forward_onednn(shape(batch), x, params_, bias(params_), y);
    else
      kernels::conv2d_forward_cpu(shape(batch), x, params_, bias(params_), y, workspace);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    if (onednn_backward_)
      kernels::conv2d_backward_onednn(shape(batch), x, params_, dy, dx, grads_, bias(grads_));
    else
      kernels::conv2d_backward_cpu(shape(batch), x, params_, dy, dx, grads_, bias(grads_),
                                   workspace);
  }

 private:
  float* bias(float* base) const { return base + bias_offset(plan_); }
  kernels::Conv2dShape shape(int batch) const { return conv2d_shape(plan_, batch); }
  bool onednn_forward_, onednn_backward_;
};

class MaxPoolLayer : public Layer {
 public:
  using Layer::Layer;
  void reserve(int max_batch) override {
    argmax_.resize(static_cast<size_t>(max_batch) * out_size());
  }
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::maxpool_forward_cpu(shape(batch), x, y, argmax_.data());
  }
  void backward(int batch, const float*, const float*, const float* dy, float* dx,
                float*) override {
    if (dx) kernels::maxpool_backward_cpu(shape(batch), dy, argmax_.data(), dx);
  }

 private:
  kernels::PoolShape shape(int batch) const { return pool_shape(plan_, batch); }
  std::vector<int32_t> argmax_;
};

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

class FlattenLayer : public Layer {
 public:
  using Layer::Layer;
  bool is_view() const override { return true; }
  void forward(int, const float*, float*, float*) override {}
  void backward(int, const float*, const float*, const float*, float*, float*) override {}
};

}  // namespace

bool layers_available(DeviceKind kind) { return kind == DeviceKind::cpu || cuda_built(); }

void init_layer_params(const LayerPlan& plan, float* host, std::mt19937_64& gen) {
  if (plan.spec.kind == LayerKind::dense) {
    const size_t in = shape_size(plan.in), out = shape_size(plan.out);
    init_weights_and_bias(host, in * out, out, in, gen);
  } else if (plan.spec.kind == LayerKind::conv2d) {
    const size_t k = static_cast<size_t>(plan.spec.kernel);
    const size_t fan_in = k * k * static_cast<size_t>(plan.in[2]);
    const size_t out = static_cast<size_t>(plan.spec.units);
    init_weights_and_bias(host, fan_in * out, out, fan_in, gen);
  }
}

std::unique_ptr<Layer> make_cpu_layer(const LayerPlan& plan, CpuKernels kernels) {
  const bool onednn = kernels == CpuKernels::best && kernels::onednn_built();
  switch (plan.spec.kind) {
    case LayerKind::dense: return std::make_unique<DenseLayer>(plan, onednn);
    case LayerKind::conv2d: return std::make_unique<Conv2dLayer>(plan, onednn);
    case LayerKind::maxpool: return std::make_unique<MaxPoolLayer>(plan);
    case LayerKind::relu: return std::make_unique<ReluLayer>(plan);
    case LayerKind::flatten: return std::make_unique<FlattenLayer>(plan);
  }
  return nullptr;
}

}  // namespace lockstep
