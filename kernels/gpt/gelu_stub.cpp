// Stands in for gelu.cu when CUDA is not built: every *_cuda function throws (kernels/cuda/stub.h).
#include "kernels/cuda/stub.h"
#include "kernels/gpt/gelu.h"

namespace lockstep::kernels {

void gelu_forward_cuda(const float*, float*, size_t, cudaStream_t, uint16_t*, uint16_t*) {
  cuda_not_built("gelu_forward_cuda");
}
void gelu_backward_cuda(const float*, const float*, float*, size_t, cudaStream_t) {
  cuda_not_built("gelu_backward_cuda");
}
void gelu_backward_bf16_column_sums_cuda(const float*, const float*, size_t, int, uint16_t*, float*,
                                         cudaStream_t) {
  cuda_not_built("gelu_backward_bf16_column_sums_cuda");
}
void gelu_backward_bf16_column_sums_cuda(const uint16_t*, const float*, size_t, int, uint16_t*,
                                         float*, cudaStream_t) {
  cuda_not_built("gelu_backward_bf16_column_sums_cuda");
}

}  // namespace lockstep::kernels
