// Stands in for dense.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/cuda/stub.h"
#include "kernels/dense.h"

namespace lockstep::kernels {

void dense_forward_cuda(const DenseShape&, const float*, const float*, const float*, float*,
                        cudaStream_t) {
  cuda_not_built("dense_forward_cuda");
}
void dense_backward_cuda(const DenseShape&, const float*, const float*, const float*, float*,
                         float*, float*, cudaStream_t) {
  cuda_not_built("dense_backward_cuda");
}
void dense_forward_bf16_cuda(const DenseShape&, const float*, const uint16_t*, const float*, float*,
                             uint16_t*, cudaStream_t, const float*) {
  cuda_not_built("dense_forward_bf16_cuda");
}
void dense_backward_bf16_cuda(const DenseShape&, const uint16_t*, const uint16_t*, const float*,
                              float*, float*, float*, uint16_t*, cudaStream_t, uint16_t*) {
  cuda_not_built("dense_backward_bf16_cuda");
}
void dense_forward_bf16_out_cuda(const DenseShape&, const uint16_t*, const uint16_t*,
                                 const uint16_t*, const float*, uint16_t*, cudaStream_t) {
  cuda_not_built("dense_forward_bf16_out_cuda");
}

}  // namespace lockstep::kernels
