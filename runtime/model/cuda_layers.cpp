// The CUDA twins of the layers in layers.cpp: the same shapes and contracts, computed by the
// kernels' *_cuda functions on the stream the model gives. Pointers are device memory. This file
// needs no CUDA header: the kernel launchers are declared without one and, in a build without
// CUDA, stand-ins throw (layers_available(DeviceKind::cuda) is false there, so the app refuses
// --device cuda before any of this runs).
//
// Precision::bf16 swaps dense and conv2d for twins whose GEMMs run in bf16 with fp32 accumulation
// (kernels' *_bf16_cuda). Parameters, gradients and activations between layers stay fp32 (master
// weights: the optimizer and the all-reduce see fp32 only). Each such layer keeps a bf16 copy of
// its weights, cast at every forward: once per micro-batch rather than once per step, but a stale
// copy is impossible whoever changed the parameters (optimizer, checkpoint load, write_params), and
// the weights are small beside the activations. Storing activations in bf16 (relu and maxpool
// writing bf16) would save the cast pass of each dense input and halve activation traffic.
#include <cstdint>
#include <memory>

#include "kernels/activation.h"
#include "kernels/cast.h"
#include "kernels/conv2d.h"
#include "kernels/dense.h"
#include "kernels/pool.h"
#include "runtime/base/buffer.h"
#include "runtime/base/error.h"
#include "runtime/model/layer_shapes.h"
#include "runtime/model/layers.h"

namespace lockstep {
namespace {

class CudaLayer : public Layer {
 public:
  CudaLayer(const LayerPlan& plan, cudaStream_t stream) : Layer(plan), stream_(stream) {}

 protected:
  cudaStream_t stream_;
};

class CudaDense : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::dense_forward_cuda(dense_shape(plan_, batch), x, params_, params_ + bias_offset(plan_),
                                y, stream_);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float*) override {
    kernels::dense_backward_cuda(dense_shape(plan_, batch), x, params_, dy, dx, grads_,
                                 grads_ + bias_offset(plan_), stream_);
  }
};

class CudaConv2d : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  size_t workspace_floats(int batch) const override {
    return kernels::conv2d_workspace_floats(conv2d_shape(plan_, batch));
  }
  void forward(int batch, const float* x, float* y, float* workspace) override {
    kernels::conv2d_forward_cuda(conv2d_shape(plan_, batch), x, params_,
                                 params_ + bias_offset(plan_), y, workspace, stream_);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    kernels::conv2d_backward_cuda(conv2d_shape(plan_, batch), x, params_, dy, dx, grads_,
                                  grads_ + bias_offset(plan_), workspace, stream_);
  }
};

// The bf16 weight copy of a dense or conv2d layer: the weights open the layer's parameters, the
// bias (kept in fp32) follows them.
class Bf16Weights {
 public:
  explicit Bf16Weights(const LayerPlan& plan)
      : words_(DeviceKind::cuda, static_cast<size_t>(bias_offset(plan))) {}
  const uint16_t* refresh(const float* params, cudaStream_t stream) {
    kernels::cast_f32_to_bf16_cuda(params, words_.data(), words_.size(), stream);
    return words_.data();
  }
  const uint16_t* get() const { return words_.data(); }

 private:
  Buffer<uint16_t> words_;
};

class CudaDenseBf16 : public CudaLayer {
 public:
  CudaDenseBf16(const LayerPlan& plan, cudaStream_t stream) : CudaLayer(plan, stream), w16_(plan) {}
  // The bf16 input is kept from forward to backward (dw = x^T dy).
  void reserve(int max_batch) override {
    x16_ = Buffer<uint16_t>(DeviceKind::cuda, static_cast<size_t>(max_batch) * in_size());
  }
  // dy in bf16, scratch of the backward pass.
  size_t workspace_floats(int batch) const override {
    return (static_cast<size_t>(batch) * out_size() + 1) / 2;
  }
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::dense_forward_bf16_cuda(dense_shape(plan_, batch), x, w16_.refresh(params_, stream_),
                                     params_ + bias_offset(plan_), y, x16_.data(), stream_);
  }
  void backward(int batch, const float*, const float*, const float* dy, float* dx,
                float* workspace) override {
    kernels::dense_backward_bf16_cuda(dense_shape(plan_, batch), x16_.data(), w16_.get(), dy, dx,
                                      grads_, grads_ + bias_offset(plan_),
                                      reinterpret_cast<uint16_t*>(workspace), stream_);
  }

 private:
  Bf16Weights w16_;
  Buffer<uint16_t> x16_;
};

class CudaConv2dBf16 : public CudaLayer {
 public:
  CudaConv2dBf16(const LayerPlan& plan, cudaStream_t stream) : CudaLayer(plan, stream), w16_(plan) {}
  size_t workspace_floats(int batch) const override {
    return kernels::conv2d_bf16_workspace_floats(conv2d_shape(plan_, batch));
  }
  void forward(int batch, const float* x, float* y, float* workspace) override {
    kernels::conv2d_forward_bf16_cuda(conv2d_shape(plan_, batch), x, w16_.refresh(params_, stream_),
                                      params_ + bias_offset(plan_), y, workspace, stream_);
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    kernels::conv2d_backward_bf16_cuda(conv2d_shape(plan_, batch), x, w16_.get(), dy, dx, grads_,
                                       grads_ + bias_offset(plan_), workspace, stream_);
  }

 private:
  Bf16Weights w16_;
};

class CudaMaxPool : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  void reserve(int max_batch) override {
    argmax_ = Buffer<int32_t>(DeviceKind::cuda, static_cast<size_t>(max_batch) * out_size());
  }
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::maxpool_forward_cuda(pool_shape(plan_, batch), x, y, argmax_.data(), stream_);
  }
  void backward(int batch, const float*, const float*, const float* dy, float* dx,
                float*) override {
    if (dx) kernels::maxpool_backward_cuda(pool_shape(plan_, batch), dy, argmax_.data(), dx, stream_);
  }

 private:
  Buffer<int32_t> argmax_;
};

class CudaRelu : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::relu_forward_cuda(x, y, static_cast<size_t>(batch) * out_size(), stream_);
  }
  void backward(int batch, const float*, const float* y, const float* dy, float* dx,
                float*) override {
    if (dx) kernels::relu_backward_cuda(y, dy, dx, static_cast<size_t>(batch) * out_size(), stream_);
  }
};

class CudaFlatten : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  bool is_view() const override { return true; }
  void forward(int, const float*, float*, float*) override {}
  void backward(int, const float*, const float*, const float*, float*, float*) override {}
};

}  // namespace

std::unique_ptr<Layer> make_cuda_layer(const LayerPlan& plan, cudaStream_t stream,
                                       Precision precision) {
  const bool bf16 = precision == Precision::bf16;
  switch (plan.spec.kind) {
    case LayerKind::dense:
      if (bf16) return std::make_unique<CudaDenseBf16>(plan, stream);
      return std::make_unique<CudaDense>(plan, stream);
    case LayerKind::conv2d:
      if (bf16) return std::make_unique<CudaConv2dBf16>(plan, stream);
      return std::make_unique<CudaConv2d>(plan, stream);
    case LayerKind::maxpool: return std::make_unique<CudaMaxPool>(plan, stream);
    case LayerKind::relu: return std::make_unique<CudaRelu>(plan, stream);
    case LayerKind::flatten: return std::make_unique<CudaFlatten>(plan, stream);
  }
  return nullptr;
}

}  // namespace lockstep
