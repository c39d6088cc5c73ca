// Stands in for cast.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/cast.h"
#include "kernels/cuda/stub.h"

namespace lockstep::kernels {

void cast_f32_to_bf16_cuda(const float*, uint16_t*, size_t, cudaStream_t) {
  cuda_not_built("cast_f32_to_bf16_cuda");
}
void cast_bf16_to_f32_cuda(const uint16_t*, float*, size_t, cudaStream_t) {
  cuda_not_built("cast_bf16_to_f32_cuda");
}

}  // namespace lockstep::kernels
