// The CUDA twins of the layers in layers.cpp: the same shapes and contracts, computed by the
// kernels' *_cuda functions on the stream the model gives. Pointers are device memory. This file
// needs no CUDA header: the kernel launchers are declared without one and, in a build without
// CUDA, stand-ins throw (layers_available(DeviceKind::cuda) is false there, so the app refuses
// --device cuda before any of this runs).
#include <memory>

#include "kernels/activation.h"
#include "kernels/conv2d.h"
#include "kernels/dense.h"
#include "kernels/pool.h"
#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/layer_shapes.h"
#include "runtime/layers.h"

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
  if (precision != Precision::fp32)
    throw UsageError("--precision " + std::string(precision_name(precision)) +
                     " is not available yet: the CUDA layers compute in fp32 (bf16 GEMMs with "
                     "fp32 master weights are still missing); use --precision fp32");
  switch (plan.spec.kind) {
    case LayerKind::dense: return std::make_unique<CudaDense>(plan, stream);
    case LayerKind::conv2d: return std::make_unique<CudaConv2d>(plan, stream);
    case LayerKind::maxpool: return std::make_unique<CudaMaxPool>(plan, stream);
    case LayerKind::relu: return std::make_unique<CudaRelu>(plan, stream);
    case LayerKind::flatten: return std::make_unique<CudaFlatten>(plan, stream);
  }
  return nullptr;
}

}  // namespace lockstep
