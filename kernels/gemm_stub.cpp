// Stands in for gemm.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/cuda/stub.h"
#include "kernels/gemm.h"

namespace lockstep::kernels {

void gemm_cuda(const GemmShape&, const float*, const float*, float*, cudaStream_t) {
  cuda_not_built("gemm_cuda");
}
void gemm_bf16_cuda(const GemmShape&, const uint16_t*, const uint16_t*, float*, cudaStream_t) {
  cuda_not_built("gemm_bf16_cuda");
}
void gemm_bf16_out_cuda(const GemmShape&, const uint16_t*, const uint16_t*, uint16_t*,
                        cudaStream_t) {
  cuda_not_built("gemm_bf16_out_cuda");
}
void gemm_bf16_bias_cuda(const GemmShape&, const uint16_t*, const uint16_t*, const float*, float*,
                         cudaStream_t, const float*) {
  cuda_not_built("gemm_bf16_bias_cuda");
}
bool gemm_bf16_bias_out_cuda(const GemmShape&, const uint16_t*, const uint16_t*, const uint16_t*,
                             uint16_t*, cudaStream_t) {
  cuda_not_built("gemm_bf16_bias_out_cuda");
}
bool gemm_bf16_dgelu_out_cuda(const GemmShape&, const uint16_t*, const uint16_t*, const uint16_t*,
                              uint16_t*, cudaStream_t) {
  cuda_not_built("gemm_bf16_dgelu_out_cuda");
}
bool gemm_bf16_bias_gelu_cuda(const GemmShape&, const uint16_t*, const uint16_t*, const uint16_t*,
                              uint16_t*, uint16_t*, cudaStream_t) {
  cuda_not_built("gemm_bf16_bias_gelu_cuda");
}

std::vector<float> gemm_bf16_lt_algorithm_times_cuda(const GemmShape&, const uint16_t*,
                                                     const uint16_t*, uint16_t*, int, int,
                                                     cudaStream_t) {
  cuda_not_built("gemm_bf16_lt_algorithm_times_cuda");
}

}  // namespace lockstep::kernels
