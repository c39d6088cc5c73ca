// Stands in for conv2d.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/conv/conv2d.h"
#include "kernels/cuda/stub.h"

namespace lockstep::kernels {

void conv2d_forward_cuda(const Conv2dShape&, const float*, const float*, const float*, float*,
                         float*, cudaStream_t) {
  cuda_not_built("conv2d_forward_cuda");
}
void conv2d_backward_cuda(const Conv2dShape&, const float*, const float*, const float*, float*,
                          float*, float*, float*, cudaStream_t) {
  cuda_not_built("conv2d_backward_cuda");
}
void conv2d_forward_bf16_cuda(const Conv2dShape&, const float*, const uint16_t*, const float*,
                              float*, float*, cudaStream_t) {
  cuda_not_built("conv2d_forward_bf16_cuda");
}
void conv2d_backward_bf16_cuda(const Conv2dShape&, const float*, const uint16_t*, const float*,
                               float*, float*, float*, float*, cudaStream_t) {
  cuda_not_built("conv2d_backward_bf16_cuda");
}

void conv2d_forward_direct_cuda(const Conv2dShape&, const float*, const float*, const float*,
                                float*, bool, cudaStream_t) {
  cuda_not_built("conv2d_forward_direct_cuda");
}
void conv2d_filter_direct_cuda(const Conv2dShape&, const float*, const float*, float*, float*,
                               float*, bool, cudaStream_t) {
  cuda_not_built("conv2d_filter_direct_cuda");
}

}  // namespace lockstep::kernels
