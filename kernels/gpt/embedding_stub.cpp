// Stands in for embedding.cu when CUDA is not built: every *_cuda function throws
// (kernels/cuda/stub.h).
#include "kernels/cuda/stub.h"
#include "kernels/gpt/embedding.h"

namespace lockstep::kernels {

void tokens_from_floats_cuda(const float*, int32_t*, size_t, int, cudaStream_t) {
  cuda_not_built("tokens_from_floats_cuda");
}
void embedding_forward_cuda(const EmbeddingShape&, const int32_t*, const float*, const float*,
                            float*, cudaStream_t) {
  cuda_not_built("embedding_forward_cuda");
}
void embedding_backward_cuda(const EmbeddingShape&, const int32_t*, const float*, float*, float*,
                             cudaStream_t) {
  cuda_not_built("embedding_backward_cuda");
}

}  // namespace lockstep::kernels
