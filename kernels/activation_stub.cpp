// Stands in for activation.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/activation.h"
#include "kernels/cuda/stub.h"

namespace lockstep::kernels {

void relu_forward_cuda(const float*, float*, size_t, cudaStream_t) {
  cuda_not_built("relu_forward_cuda");
}
void relu_backward_cuda(const float*, const float*, float*, size_t, cudaStream_t) {
  cuda_not_built("relu_backward_cuda");
}

}  // namespace lockstep::kernels
