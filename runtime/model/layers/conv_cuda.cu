// The CUDA twin of the convolution layer (conv.cpp): the same shapes and contract, computed on the
// model's stream over device memory by cuDNN (conv2d_*_cudnn) in a build with it, else by the
// kernels' im2col + cuBLAS twins (conv2d_*_cuda). With Precision::bf16 they compute in bf16 with
// fp32 accumulation (cuda_layer.h: the weight copy). Plain C++ over the kernels' launchers: it is
// a .cu only so that it is built with CUDA and conv_cuda_stub.cpp without.
#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/base/error.h"

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

// cuDNN's convolutions (kernels/conv2d.h): the layer keeps the weights in cuDNN's KRSC order, in
// fp32 or as bf16 words (T), rewritten from the parameters at every forward (as Bf16Weights: never
// stale whoever changed them) and read by the backward pass after it.
template <class T>
class CudnnConv2d : public CudaLayer {
 public:
  CudnnConv2d(const LayerPlan& plan, cudaStream_t stream)
      : CudaLayer(plan, stream), wk_(DeviceKind::cuda, static_cast<size_t>(bias_offset(plan))) {}
  size_t workspace_floats(int batch) const override {
    return kernels::conv2d_cudnn_workspace_floats(conv2d_shape(plan_, batch), kBf16);
  }
  void forward(int batch, const float* x, float* y, float* workspace) override {
    const kernels::Conv2dShape s = conv2d_shape(plan_, batch);
    const float* b = params_ + bias_offset(plan_);
    if constexpr (kBf16) {
      kernels::conv2d_weights_krsc_bf16_cuda(s, params_, wk_.data(), stream_);
      kernels::conv2d_forward_bf16_cudnn(s, x, wk_.data(), b, y, workspace, stream_);
    } else {
      kernels::conv2d_weights_krsc_cuda(s, params_, wk_.data(), stream_);
      kernels::conv2d_forward_cudnn(s, x, wk_.data(), b, y, workspace, stream_);
    }
  }
  void backward(int batch, const float* x, const float*, const float* dy, float* dx,
                float* workspace) override {
    const kernels::Conv2dShape s = conv2d_shape(plan_, batch);
    float* db = grads_ + bias_offset(plan_);
    if constexpr (kBf16)
      kernels::conv2d_backward_bf16_cudnn(s, x, wk_.data(), dy, dx, grads_, db, workspace, stream_);
    else
      kernels::conv2d_backward_cudnn(s, x, wk_.data(), dy, dx, grads_, db, workspace, stream_);
  }

 private:
  static constexpr bool kBf16 = sizeof(T) == 2;
  Buffer<T> wk_;
};

// cuDNN when the build has it, unless LOCKSTEP_CUDA_CONV=im2col asks for the im2col + cuBLAS
// twins (a comparison in one build; docs/PERFORMANCE.md).
bool use_cudnn() {
  const char* choice = std::getenv("LOCKSTEP_CUDA_CONV");
  if (choice != nullptr && *choice != '\0') {
    const std::string c = choice;
    if (c == "im2col") return false;
    if (c != "cudnn")
      throw UsageError("LOCKSTEP_CUDA_CONV='" + c + "': expected cudnn or im2col");
    if (!kernels::conv2d_cudnn_available())
      throw UsageError("LOCKSTEP_CUDA_CONV=cudnn, but this build has no cuDNN");
  }
  return kernels::conv2d_cudnn_available();
}

}  // namespace

std::unique_ptr<Layer> make_conv_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  const bool bf16 = where.precision == Precision::bf16;
  if (use_cudnn()) {
    if (bf16) return std::make_unique<CudnnConv2d<uint16_t>>(plan, where.stream);
    return std::make_unique<CudnnConv2d<float>>(plan, where.stream);
  }
  if (bf16) return std::make_unique<CudaConv2dBf16>(plan, where.stream);
  return std::make_unique<CudaConv2d>(plan, where.stream);
}

}  // namespace lockstep
