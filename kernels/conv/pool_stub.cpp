// Stands in for pool.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/conv/pool.h"
#include "kernels/cuda/stub.h"

namespace lockstep::kernels {

void maxpool_forward_cuda(const PoolShape&, const float*, float*, int32_t*, cudaStream_t) {
  cuda_not_built("maxpool_forward_cuda");
}
void maxpool_backward_cuda(const PoolShape&, const float*, const int32_t*, float*, cudaStream_t) {
  cuda_not_built("maxpool_backward_cuda");
}

}  // namespace lockstep::kernels
