#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/decode.h"

namespace lockstep::kernels {

namespace {

__global__ void decode_embedding_kernel(const int* at, const float* wte, const float* wpe, float* x,
                                        int dim) {
  const size_t position = static_cast<size_t>(at[0]), token = static_cast<size_t>(at[1]);
  for (size_t j = cuda::thread_index(); j < static_cast<size_t>(dim); j += cuda::thread_stride())
    x[j] = wte[token * dim + j] + wpe[position * dim + j];
}

__global__ void decode_store_kv_kernel(const int* at, const float* qkv, float* keys, float* values,
                                       int dim) {
  const size_t row = static_cast<size_t>(at[0]) * dim;
  for (size_t j = cuda::thread_index(); j < static_cast<size_t>(dim); j += cuda::thread_stride()) {
    keys[row + j] = qkv[dim + j];
    values[row + j] = qkv[2 * static_cast<size_t>(dim) + j];
  }
}

__device__ float block_max(float v) {
  __shared__ float partial[cuda::kWarp];
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  const int warps = blockDim.x / cuda::kWarp;
  for (int offset = cuda::kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : -INFINITY;
  for (int offset = cuda::kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  return v;
}

// One block per head: the scores of every cached position into shared memory, their maximum and
// sum over the block, then each thread one output value (a column of the values, summed in
// position order).
__global__ void decode_attention_kernel(const float* q, const float* keys, const float* values,
                                        const int* at, int dim, int head_dim, float scale,
                                        float* out) {
  extern __shared__ float scores[];
  const int length = at[0] + 1;
  const int h = blockIdx.x;
  const float* qh = q + static_cast<size_t>(h) * head_dim;
  float top = -INFINITY;
  for (int t = threadIdx.x; t < length; t += blockDim.x) {
    const float* k = keys + static_cast<size_t>(t) * dim + static_cast<size_t>(h) * head_dim;
    float s = 0.0f;
    for (int j = 0; j < head_dim; ++j) s += qh[j] * k[j];
    s *= scale;
    scores[t] = s;
    top = fmaxf(top, s);
  }
  top = block_max(top);  // its barrier also orders the scores' writes before the reads below
  float sum = 0.0f;
  for (int t = threadIdx.x; t < length; t += blockDim.x) {
    const float e = expf(scores[t] - top);
    scores[t] = e;
    sum += e;
  }
  sum = cuda::block_sum(sum);
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
    const float* v = values + static_cast<size_t>(h) * head_dim + j;
    float acc = 0.0f;
    for (int t = 0; t < length; ++t) acc += scores[t] * v[static_cast<size_t>(t) * dim];
    out[static_cast<size_t>(h) * head_dim + j] = acc / sum;
  }
}

}  // namespace

void decode_embedding_cuda(const int* at, const float* wte, const float* wpe, float* x, int dim,
                           cudaStream_t stream) {
  if (dim <= 0) throw std::invalid_argument("decode_embedding_cuda: dim " + std::to_string(dim));
  decode_embedding_kernel<<<cuda::grid_for(static_cast<size_t>(dim)), cuda::kThreads, 0, stream>>>(
      at, wte, wpe, x, dim);
  LS_CHECK_LAUNCH("decode_embedding_kernel");
}

void decode_store_kv_cuda(const int* at, const float* qkv, float* keys, float* values, int dim,
                          cudaStream_t stream) {
  if (dim <= 0) throw std::invalid_argument("decode_store_kv_cuda: dim " + std::to_string(dim));
  decode_store_kv_kernel<<<cuda::grid_for(static_cast<size_t>(dim)), cuda::kThreads, 0, stream>>>(
      at, qkv, keys, values, dim);
  LS_CHECK_LAUNCH("decode_store_kv_kernel");
}

void decode_attention_cuda(const float* q, const float* keys, const float* values, const int* at,
                           int max_length, int dim, int heads, float* out, cudaStream_t stream) {
  if (heads <= 0 || dim <= 0 || dim % heads != 0 || max_length < 1 ||
      max_length > kDecodeMaxContext)
    throw std::invalid_argument("decode_attention_cuda: " + std::to_string(heads) +
                                " heads of dim " + std::to_string(dim) + ", max_length " +
                                std::to_string(max_length) + " (at most " +
                                std::to_string(kDecodeMaxContext) + ")");
  const int head_dim = dim / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int threads =
      cuda::threads_for_row(std::max(head_dim, std::min(max_length, cuda::kThreads)));
  decode_attention_kernel<<<heads, threads, static_cast<size_t>(max_length) * sizeof(float),
                            stream>>>(q, keys, values, at, dim, head_dim, scale, out);
  LS_CHECK_LAUNCH("decode_attention_kernel");
}

}  // namespace lockstep::kernels
