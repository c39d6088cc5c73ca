// Stands in for residual.cu when CUDA is not built: every *_cuda function throws
// (kernels/cuda/stub.h).
#include "kernels/cuda/stub.h"
#include "kernels/gpt/residual.h"

namespace lockstep::kernels {

void residual_add_cuda(const float*, const float*, float*, size_t, cudaStream_t) {
  cuda_not_built("residual_add_cuda");
}
void residual_accumulate_cuda(const float*, float*, size_t, cudaStream_t) {
  cuda_not_built("residual_accumulate_cuda");
}

}  // namespace lockstep::kernels
