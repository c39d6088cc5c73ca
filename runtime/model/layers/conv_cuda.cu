// The CUDA twin of the convolution layer (conv.cpp): the same shapes and contract, computed by the
// kernels' conv2d_*_cuda on the model's stream, over device memory. With Precision::bf16 its GEMMs
// run in bf16 with fp32 accumulation (cuda_layer.h: the weight copy). Plain C++ over the kernels'
// launchers: it is a .cu only so that it is built with CUDA and conv_cuda_stub.cpp without.
#include <memory>

#include "runtime/model/layers/conv.h"
#include "runtime/model/layers/cuda_layer.h"

namespace lockstep {
namespace {

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

}  // namespace

std::unique_ptr<Layer> make_conv_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  if (where.precision == Precision::bf16) return std::make_unique<CudaConv2dBf16>(plan, where.stream);
  return std::make_unique<CudaConv2d>(plan, where.stream);
}

}  // namespace lockstep
