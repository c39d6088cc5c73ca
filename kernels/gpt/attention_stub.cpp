// Stands in for attention.cu when CUDA is not built: every *_cuda function throws
// (kernels/cuda/stub.h).
#include "kernels/cuda/stub.h"
#include "kernels/gpt/attention.h"

namespace lockstep::kernels {

void attention_forward_cuda(const AttentionShape&, const float*, float*, float*, float*, float*,
                            cudaStream_t) {
  cuda_not_built("attention_forward_cuda");
}
void attention_backward_cuda(const AttentionShape&, const float*, const float*, const float*,
                             float*, float*, cudaStream_t) {
  cuda_not_built("attention_backward_cuda");
}

}  // namespace lockstep::kernels
