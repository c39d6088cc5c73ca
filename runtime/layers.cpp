#include "runtime/layers.h"

#include <cmath>

#include "kernels/activation.h"
#include "kernels/conv2d.h"
#include "kernels/dense.h"
#include "kernels/pool.h"

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
  using Layer::Layer;
  void init_params(std::mt19937_64& gen) override {
    init_weights_and_bias(params_, in_size() * out_size(), out_size(), in_size(), gen);
  }
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::dense_forward_cpu(shape(batch), x, params_, bias(params_), y);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float*) override {
    kernels::dense_backward_cpu(shape(batch), x, params_, dy, dx, grads_, bias(grads_));
  }

 private:
  kernels::DenseShape shape(int batch) const {
    return {batch, static_cast<int>(in_size()), static_cast<int>(out_size())};
  }
  float* bias(float* base) const { return base + in_size() * out_size(); }
};

class Conv2dLayer : public Layer {
 public:
  using Layer::Layer;
  void init_params(std::mt19937_64& gen) override {
    size_t k = static_cast<size_t>(plan_.spec.kernel);
    size_t fan_in = k * k * static_cast<size_t>(plan_.in[2]);
    init_weights_and_bias(params_, fan_in * out_channels(), out_channels(), fan_in, gen);
  }
  size_t workspace_floats(int batch) const override {
    return kernels::conv2d_workspace_floats(shape(batch));
  }
  void forward(int batch, const float* x, float* y, float* workspace) override {
    kernels::conv2d_forward_cpu(shape(batch), x, params_, bias(params_), y, workspace);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    kernels::conv2d_backward_cpu(shape(batch), x, params_, dy, dx, grads_, bias(grads_),
                                 workspace);
  }

 private:
  size_t out_channels() const { return static_cast<size_t>(plan_.spec.units); }
  float* bias(float* base) const { return base + plan_.params - out_channels(); }
  kernels::Conv2dShape shape(int batch) const {
    kernels::Conv2dShape s;
    s.n = batch;
    s.h = plan_.in[0];
    s.w = plan_.in[1];
    s.c_in = plan_.in[2];
    s.c_out = plan_.spec.units;
    s.kh = s.kw = plan_.spec.kernel;
    s.stride = plan_.spec.stride;
    s.pad_h = s.pad_w = plan_.spec.kernel / 2;
    return s;
  }
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
  kernels::PoolShape shape(int batch) const {
    return {batch, plan_.in[0], plan_.in[1], plan_.in[2], plan_.spec.kernel};
  }
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

bool layers_available(DeviceKind kind) { return kind == DeviceKind::cpu; }

std::unique_ptr<Layer> make_cpu_layer(const LayerPlan& plan) {
  switch (plan.spec.kind) {
    case LayerKind::dense: return std::make_unique<DenseLayer>(plan);
    case LayerKind::conv2d: return std::make_unique<Conv2dLayer>(plan);
    case LayerKind::maxpool: return std::make_unique<MaxPoolLayer>(plan);
    case LayerKind::relu: return std::make_unique<ReluLayer>(plan);
    case LayerKind::flatten: return std::make_unique<FlattenLayer>(plan);
  }
  return nullptr;
}

}  // namespace lockstep
