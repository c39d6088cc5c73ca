// Stands in for loss.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/cuda/stub.h"
#include "kernels/step/loss.h"

namespace lockstep::kernels {

void softmax_cross_entropy_sums_cuda(const float*, const int32_t*, const float*, int, int, float,
                                     float*, LossTotals*, cudaStream_t) {
  cuda_not_built("softmax_cross_entropy_sums_cuda");
}
void softmax_cross_entropy_bf16_sums_cuda(const uint16_t*, const int32_t*, const float*, int, int,
                                          float, uint16_t*, LossTotals*, cudaStream_t) {
  cuda_not_built("softmax_cross_entropy_bf16_sums_cuda");
}
LossTotals softmax_cross_entropy_cuda(const float*, const int32_t*, const float*, int, int, float,
                                      float*, cudaStream_t) {
  cuda_not_built("softmax_cross_entropy_cuda");
}
void mse_sums_cuda(const float*, const float*, const float*, int, int, float, float*, LossTotals*,
                   cudaStream_t) {
  cuda_not_built("mse_sums_cuda");
}
LossTotals mse_cuda(const float*, const float*, const float*, int, int, float, float*,
                    cudaStream_t) {
  cuda_not_built("mse_cuda");
}

}  // namespace lockstep::kernels
