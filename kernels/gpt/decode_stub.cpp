// Stands in for decode.cu when CUDA is not built: every *_cuda function throws
// (kernels/cuda/stub.h).
#include "kernels/cuda/stub.h"
#include "kernels/gpt/decode.h"

namespace lockstep::kernels {

void decode_embedding_cuda(const int*, const float*, const float*, float*, int, cudaStream_t) {
  cuda_not_built("decode_embedding_cuda");
}
void decode_store_kv_cuda(const int*, const float*, float*, float*, int, cudaStream_t) {
  cuda_not_built("decode_store_kv_cuda");
}
void decode_attention_cuda(const float*, const float*, const float*, const int*, int, int, int,
                           float*, cudaStream_t) {
  cuda_not_built("decode_attention_cuda");
}

}  // namespace lockstep::kernels
