// The CUDA twin of the dense layer (dense.cpp): the same shapes and contract, computed by the
// kernels' dense_*_cuda on the model's stream, over device memory. With Precision::bf16 its GEMMs
// run in bf16 with fp32 accumulation (cuda_layer.h: the weight copy, the model's where it keeps
// one). Plain C++ over the kernels' launchers: it is a .cu only so that it is built with CUDA and
// dense_cuda_stub.cpp without.
#include <cstdint>
#include <memory>

#include "runtime/model/layers/cuda_layer.h"
#include "runtime/model/layers/dense.h"

namespace lockstep {
namespace {

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

class CudaDenseBf16 : public CudaLayer {
 public:
  CudaDenseBf16(const LayerPlan& plan, const CudaLayerPlacement& where)
      : CudaLayer(plan, where.stream), w16_(plan, where.bf16_params) {}
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

}  // namespace

std::unique_ptr<Layer> make_dense_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  if (where.precision == Precision::bf16) return std::make_unique<CudaDenseBf16>(plan, where);
  return std::make_unique<CudaDense>(plan, where.stream);
}

}  // namespace lockstep
