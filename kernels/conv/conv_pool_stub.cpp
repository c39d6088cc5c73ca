// Stands in for conv_pool.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/conv/conv_pool.h"
#include "kernels/cuda/stub.h"

namespace lockstep::kernels {

void conv_pool_forward_cuda(const ConvPoolShape&, const float*, const float*, const float*, float*,
                            int8_t*, bool, cudaStream_t) {
  cuda_not_built("conv_pool_forward_cuda");
}
void conv_pool_backward_cuda(const ConvPoolShape&, const float*, const float*, const int8_t*,
                             float*, float*, float*, bool, cudaStream_t) {
  cuda_not_built("conv_pool_backward_cuda");
}

}  // namespace lockstep::kernels
