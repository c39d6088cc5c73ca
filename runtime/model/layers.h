// Layers: the pieces a Model stacks. A layer knows its shapes (from its LayerPlan) and computes
// over a batch of NHWC float32 activations; it owns no parameters. Its weights and gradients are
// views into the model's flat buffers (DESIGN.md decision 4), bound once by the model. Activations
// and scratch space are also the model's, so a training step allocates nothing. Each layer type
// (layer_registry.h) makes a CPU layer (runtime/model/layers/NAME.cpp, over kernels/*_cpu or
// *_onednn) and, usually, a CUDA twin (NAME_cuda.cu, over kernels/*_cuda) behind this interface:
// the twin's pointers are device memory and its work is queued on one CUDA stream. Parameters are
// initialised on the host for both, so a seed gives the same values on either device. A layer is
// used by one thread at a time.
// No collective calls: the gradient reduction is the trainer's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "runtime/base/device_kind.h"
#include "runtime/model/model_spec.h"

namespace lockstep {

class Layer {
 public:
  explicit Layer(LayerPlan plan) : plan_(std::move(plan)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const LayerPlan& plan() const { return plan_; }
  size_t param_count() const { return plan_.params; }
  size_t in_size() const { return shape_size(plan_.in); }    // floats per sample
  size_t out_size() const { return shape_size(plan_.out); }  // floats per sample

  // Views into the flat parameter and gradient buffers: param_count() floats each.
  void bind(float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }
  // For a layer planned with a tie (LayerPlan::tied): the start of the tied layer's parameters and
  // gradients. Its first tensor is read from there and its gradient added there (+=).
  void bind_tied(const float* params, float* grads) {
    tied_params_ = params;
    tied_grads_ = grads;
  }
  // True when the output is the input itself (flatten of NHWC data): the model passes the
  // pointers through and forward/backward are not called.
  virtual bool is_view() const { return false; }
  // Scratch floats forward/backward need at this batch size (shared by all layers of a model).
  virtual size_t workspace_floats(int batch) const { return 0; }
  // Per-layer state sized for batches up to max_batch (maxpool's argmax), in the layer's memory.
  virtual void reserve(int max_batch) {}

  // Whether forward can write y as bf16 words (in the first half of y's bytes) and backward then
  // take dy so: a bf16 run's tied head on the GPU (Model::forward's bf16_ok). The mode set
  // holds for the forward and backward passes that follow, until it is set again.
  virtual bool bf16_output_supported() const { return false; }
  virtual void set_bf16_output(bool on) {}

  // y[batch, out] from x[batch, in]. Overwrites y.
  virtual void forward(int batch, const float* x, float* y, float* workspace) = 0;
  // Given x and y of the last forward and dy = dLoss/dy: parameter gradients are accumulated
  // (+=) into the bound gradient view; dx is overwritten, or skipped when null (first layer).
  virtual void backward(int batch, const float* x, const float* y, const float* dy, float* dx,
                        float* workspace) = 0;

 protected:
  LayerPlan plan_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  const float* tied_params_ = nullptr;
  float* tied_grads_ = nullptr;
};

// A view whose output is its input (layers.h: is_view), on any device: flatten's layer, and the
// ReLU a convolution has fused (model.h).
class PassThroughLayer : public Layer {
 public:
  using Layer::Layer;
  bool is_view() const override { return true; }
  void forward(int, const float*, float*, float*) override {}
  void backward(int, const float*, const float*, const float*, float*, float*) override {}
};

// Which kernels the CPU layers run: `best` takes oneDNN for the convolutions and dense products
// where the build has it (kernels/onednn/onednn.h; where oneDNN runs AVX2 kernels, a convolution
// with fewer than 8 input channels runs its backward pass on OpenBLAS, faster there), else
// OpenBLAS; `openblas` always OpenBLAS (the oracle the tests compare against). Pooling and ReLU are
// the project's own loops either way.
enum class CpuKernels { best, openblas };

// Whether this build has layers for `kind` (the CPU ones always, the CUDA ones in a CUDA build),
// so the app can fall back from --device auto and refuse --device cuda in words.
bool layers_available(DeviceKind kind);

// Fills p[0, n) uniformly in [-bound, bound) from gen (24 random bits per value, so the values
// depend only on the generator's sequence, not on the standard library's distributions).
void fill_uniform(float* p, size_t n, float bound, std::mt19937_64& gen);

// Fills p[0, n) with normal values of mean 0 and standard deviation `stddev` from gen (Box-Muller
// over two 24-bit uniforms per pair, so again independent of the standard library).
void fill_normal(float* p, size_t n, float stddev, std::mt19937_64& gen);

// PyTorch's default initialisation for Linear and Conv2d (Kaiming-uniform with a = sqrt(5)):
// `weights` then `bias` values uniform in +-1/sqrt(fan_in), for dense and conv layers.
void init_weights_and_bias(float* params, size_t weights, size_t bias, size_t fan_in,
                           std::mt19937_64& gen);

// Offset of the bias within a dense or conv layer's parameters: its c_out values come last.
inline size_t bias_offset(const LayerPlan& p) {
  return p.params - static_cast<size_t>(p.out.back());
}

}  // namespace lockstep
