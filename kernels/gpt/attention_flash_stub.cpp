// Stands in for attention_flash.cu when CUDA is not built: the launchers throw
// (kernels/cuda/stub.h); the shape rules and sizes are in attention.cpp.
#include "kernels/cuda/stub.h"
#include "kernels/gpt/attention_flash.h"

namespace lockstep::kernels {

void attention_flash_forward_cuda(const AttentionShape&, const float*, float*, uint16_t*, float*,
                                  cudaStream_t) {
  cuda_not_built("attention_flash_forward_cuda");
}
void attention_flash_heads_cuda(const AttentionShape&, const float*, uint16_t*, cudaStream_t) {
  cuda_not_built("attention_flash_heads_cuda");
}
void attention_flash_backward_cuda(const AttentionShape&, const uint16_t*, const float*,
                                   const float*, const float*, float*, float*, cudaStream_t) {
  cuda_not_built("attention_flash_backward_cuda");
}

}  // namespace lockstep::kernels
