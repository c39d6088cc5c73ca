// The CUDA twin of the ReLU layer (relu.cpp): the same contract, computed by the kernels'
// relu_*_cuda on the model's stream, over device memory. Plain C++ over the kernels' launchers: a
// .cu only so that it is built with CUDA and relu_cuda_stub.cpp without.
#include <memory>

#include "kernels/activation.h"
#include "runtime/model/layers/cuda_layer.h"
#include "runtime/model/layers/relu.h"

namespace lockstep {
namespace {

class CudaRelu : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;
  void forward(int batch, const float* x, float* y, float*) override {
    kernels::relu_forward_cuda(x, y, static_cast<size_t>(batch) * out_size(), stream_);
  }
  void backward(int batch, const float*, const float* y, const float* dy, float* dx,
                float*) override {
    if (dx)
      kernels::relu_backward_cuda(y, dy, dx, static_cast<size_t>(batch) * out_size(), stream_);
  }
};

}  // namespace

std::unique_ptr<Layer> make_relu_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<CudaRelu>(plan, where.stream);
}

}  // namespace lockstep
