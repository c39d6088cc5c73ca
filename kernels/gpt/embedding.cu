#include "kernels/cuda/launch.cuh"
#include "kernels/gpt/embedding.h"

namespace lockstep::kernels {

namespace {

__global__ void embedding_forward_kernel(EmbeddingShape s, const int32_t* tokens, const float* wte,
                                         const float* wpe, float* out) {
  const size_t n = static_cast<size_t>(s.batch) * s.seq * s.dim;
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const size_t pos = i / s.dim;
    const int j = static_cast<int>(i % s.dim);
    const int32_t tok = tokens[pos];
    const float p = wpe[(pos % s.seq) * s.dim + j];
    out[i] = tok >= 0 && tok < s.vocab ? wte[static_cast<size_t>(tok) * s.dim + j] + p : p;
  }
}

__global__ void tokens_from_floats_kernel(const float* x, int32_t* tokens, size_t n, int vocab) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const float v = x[i];
    const bool ok = v >= 0.0f && v < static_cast<float>(vocab) && v == floorf(v);
    tokens[i] = ok ? static_cast<int32_t>(v) : -1;
  }
}

// Grid: (column blocks, vocab). Each thread owns dwte[v, j] and adds the positions holding token v
// in order: the same order, and bits, every call. The block finds those positions a chunk of
// blockDim.x at a time (a ballot per warp, the warps' counts in order) into shared memory, then
// every thread adds its column over them: the tokens are read once per chunk, not once per
// position and thread. blockDim.x is a multiple of 32, at most kThreads.
__global__ void embedding_dwte_kernel(EmbeddingShape s, const int32_t* tokens, const float* dout,
                                      float* dwte) {
  __shared__ int hits[cuda::kThreads];
  __shared__ int warp_hits[cuda::kThreads / cuda::kWarp];
  const int v = blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  const int warps = blockDim.x / cuda::kWarp;
  const size_t positions = static_cast<size_t>(s.batch) * s.seq;
  float acc = 0.0f;
  bool any = false;
  for (size_t c0 = 0; c0 < positions; c0 += blockDim.x) {
    const size_t pos = c0 + threadIdx.x;
    const bool match = pos < positions && tokens[pos] == v;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < warps; ++w) {
      before += w < warp ? warp_hits[w] : 0;
      total += warp_hits[w];
    }
    if (match) hits[before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int>(pos - c0);
    __syncthreads();
    if (j < s.dim)
      for (int k = 0; k < total; ++k) {
        acc += dout[(c0 + hits[k]) * s.dim + j];
        any = true;
      }
    __syncthreads();  // hits and warp_hits read before the next chunk rewrites them
  }
  if (any && j < s.dim) dwte[static_cast<size_t>(v) * s.dim + j] += acc;
}

// One thread per dwpe[t, j]: the batch entries in order b.
__global__ void embedding_dwpe_kernel(EmbeddingShape s, const float* dout, float* dwpe) {
  const size_t n = static_cast<size_t>(s.seq) * s.dim;
  const size_t row = static_cast<size_t>(s.seq) * s.dim;
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    float acc = 0.0f;
    for (int b = 0; b < s.batch; ++b) acc += dout[b * row + i];
    dwpe[i] += acc;
  }
}

}  // namespace

void tokens_from_floats_cuda(const float* x, int32_t* tokens, size_t n, int vocab,
                             cudaStream_t stream) {
  if (n == 0) return;
  tokens_from_floats_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, tokens, n, vocab);
  LS_CHECK_LAUNCH("tokens_from_floats_kernel");
}

void embedding_forward_cuda(const EmbeddingShape& s, const int32_t* tokens, const float* wte,
                            const float* wpe, float* out, cudaStream_t stream) {
  check_embedding_shape(s, "embedding_forward_cuda");
  const size_t n = static_cast<size_t>(s.batch) * s.seq * s.dim;
  if (n == 0) return;
  embedding_forward_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(s, tokens, wte, wpe,
                                                                             out);
  LS_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward_cuda(const EmbeddingShape& s, const int32_t* tokens, const float* dout,
                             float* dwte, float* dwpe, cudaStream_t stream) {
  check_embedding_shape(s, "embedding_backward_cuda");
  if (s.batch == 0) return;
  if (dwte != nullptr) {
    const int threads = cuda::threads_for_row(s.dim);
    const dim3 grid((s.dim + threads - 1) / threads, static_cast<unsigned>(s.vocab));
    embedding_dwte_kernel<<<grid, threads, 0, stream>>>(s, tokens, dout, dwte);
    LS_CHECK_LAUNCH("embedding_dwte_kernel");
  }
  if (dwpe != nullptr) {
    const size_t n = static_cast<size_t>(s.seq) * s.dim;
    embedding_dwpe_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(s, dout, dwpe);
    LS_CHECK_LAUNCH("embedding_dwpe_kernel");
  }
}

}  // namespace lockstep::kernels
