// Stands in for conv2d_cudnn.cu in a build without cuDNN (with or without CUDA): the CUDA layers
// then use the im2col twins; calling a cuDNN twin throws.
#include <stdexcept>
#include <string>

#include "kernels/conv/conv2d.h"

namespace lockstep::kernels {
namespace {

[[noreturn]] void cudnn_not_built(const char* what) {
  throw std::runtime_error(std::string(what) +
                           " needs a CUDA build with cuDNN (cudnn.h and libcudnn found by CMake)");
}

}  // namespace

bool conv2d_cudnn_available() { return false; }
void set_cudnn_deterministic_first(bool) {}
size_t conv2d_cudnn_workspace_floats(const Conv2dShape&, bool) {
  cudnn_not_built("conv2d_cudnn_workspace_floats");
}
void conv2d_weights_krsc_cuda(const Conv2dShape&, const float*, float*, cudaStream_t) {
  cudnn_not_built("conv2d_weights_krsc_cuda");
}
void conv2d_weights_krsc_bf16_cuda(const Conv2dShape&, const float*, uint16_t*, cudaStream_t) {
  cudnn_not_built("conv2d_weights_krsc_bf16_cuda");
}
void conv2d_forward_cudnn(const Conv2dShape&, const float*, const float*, const float*, float*,
                          float*, cudaStream_t) {
  cudnn_not_built("conv2d_forward_cudnn");
}
void conv2d_backward_cudnn(const Conv2dShape&, const float*, const float*, const float*, float*,
                           float*, float*, float*, cudaStream_t) {
  cudnn_not_built("conv2d_backward_cudnn");
}
void conv2d_forward_bf16_cudnn(const Conv2dShape&, const float*, const uint16_t*, const float*,
                               float*, float*, cudaStream_t) {
  cudnn_not_built("conv2d_forward_bf16_cudnn");
}
void conv2d_backward_bf16_cudnn(const Conv2dShape&, const float*, const uint16_t*, const float*,
                                float*, float*, float*, float*, cudaStream_t) {
  cudnn_not_built("conv2d_backward_bf16_cudnn");
}

}  // namespace lockstep::kernels
