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
// in order: the same order, and bits, every call. The token reads are the same for every thread
// of a block (a broadcast from cache).
__global__ void embedding_dwte_kernel(EmbeddingShape s, const int32_t* tokens, const float* dout,
                                      float* dwte) {
  const int v = blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= s.dim) return;
  const size_t positions = static_cast<size_t>(s.batch) * s.seq;
  float acc = 0.0f;
  bool any = false;
  for (size_t pos = 0; pos < positions; ++pos) {
    if (tokens[pos] != v) continue;
    acc += dout[pos * s.dim + j];
    any = true;
  }
  if (any) dwte[static_cast<size_t>(v) * s.dim + j] += acc;
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
