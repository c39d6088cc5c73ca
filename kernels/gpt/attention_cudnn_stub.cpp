// Stands in for attention_cudnn.cu where cuDNN's frontend headers were not found (or CUDA is not
// built): the cuDNN attention is not built, never usable, and its launchers throw.
#include <stdexcept>
#include <string>

#include "kernels/gpt/attention_cudnn.h"

namespace lockstep::kernels {

namespace {
[[noreturn]] void not_built(const char* who) {
  throw std::runtime_error(std::string(who) +
                           ": this build has no cuDNN attention (CUDA, cuDNN 9 and the "
                           "cudnn-frontend headers are needed at build time: scripts/setup.sh)");
}
}  // namespace

bool attention_cudnn_built() { return false; }
bool attention_cudnn_usable(const AttentionShape&, std::string* why, bool) {
  if (why != nullptr) *why = "this build has no cuDNN attention";
  return false;
}
void attention_cudnn_forward_cuda(const AttentionShape&, const float*, float*, uint16_t*, float*,
                                  cudaStream_t) {
  not_built("attention_cudnn_forward_cuda");
}
void attention_cudnn_backward_cuda(const AttentionShape&, const uint16_t*, const float*,
                                   const float*, float*, float*, cudaStream_t) {
  not_built("attention_cudnn_backward_cuda");
}
void attention_cudnn_forward_bf16_cuda(const AttentionShape&, const float*, uint16_t*, uint16_t*,
                                       float*, cudaStream_t) {
  not_built("attention_cudnn_forward_bf16_cuda");
}
void attention_cudnn_backward_bf16_cuda(const AttentionShape&, const uint16_t*, const uint16_t*,
                                        const float*, const float*, uint16_t*, float*,
                                        cudaStream_t) {
  not_built("attention_cudnn_backward_bf16_cuda");
}
void attention_cudnn_forward_packed_cuda(const AttentionShape&, const uint16_t*, uint16_t*, float*,
                                         cudaStream_t) {
  not_built("attention_cudnn_forward_packed_cuda");
}
void attention_cudnn_backward_packed_cuda(const AttentionShape&, const uint16_t*, const uint16_t*,
                                          const float*, const uint16_t*, uint16_t*, cudaStream_t) {
  not_built("attention_cudnn_backward_packed_cuda");
}

}  // namespace lockstep::kernels
