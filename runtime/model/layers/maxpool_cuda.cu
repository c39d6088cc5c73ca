// The CUDA twin of the max-pooling layer (maxpool.cpp): the same shapes and contract, computed by
// the kernels' maxpool_*_cuda on the model's stream, its argmax in device memory. Plain C++ over
// the kernels' launchers: a .cu only so that it is built with CUDA and maxpool_cuda_stub.cpp
// without.
#include <cstdint>
#include <memory>

#include "runtime/model/layers/cuda_layer.h"
#include "runtime/model/layers/maxpool.h"

namespace lockstep {
namespace {

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
    if (dx)
      kernels::maxpool_backward_cuda(pool_shape(plan_, batch), dy, argmax_.data(), dx, stream_);
  }

 private:
  Buffer<int32_t> argmax_;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool_cuda(const LayerPlan& plan, const CudaLayerPlacement& where) {
  return std::make_unique<CudaMaxPool>(plan, where.stream);
}

}  // namespace lockstep
