// Stands in for layernorm.cu when CUDA is not built: every *_cuda function throws
// (kernels/cuda/stub.h).
#include "kernels/cuda/stub.h"
#include "kernels/gpt/layernorm.h"

namespace lockstep::kernels {

void layernorm_forward_cuda(const LayerNormShape&, const float*, const float*, const float*, float*,
                            float*, float*, cudaStream_t, uint16_t*) {
  cuda_not_built("layernorm_forward_cuda");
}
void layernorm_backward_cuda(const LayerNormShape&, const float*, const float*, const float*,
                             const float*, const float*, float*, float*, float*, cudaStream_t,
                             const float*) {
  cuda_not_built("layernorm_backward_cuda");
}

}  // namespace lockstep::kernels
