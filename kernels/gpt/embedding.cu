#include <climits>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <stdexcept>

#include "kernels/cuda/check.h"
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

// The sort's input: each position's key, its token or `vocab` for a position without one
// (tokens_from_floats' -1: it sorts last and adds nowhere), and its value, the position.
__global__ void embedding_sort_input_kernel(const int32_t* tokens, int vocab, size_t n,
                                            uint32_t* keys, int32_t* positions) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const int32_t t = tokens[i];
    keys[i] = t >= 0 && t < vocab ? static_cast<uint32_t>(t) : static_cast<uint32_t>(vocab);
    positions[i] = static_cast<int32_t>(i);
  }
}

// Grid: (sorted positions, column blocks). The positions sorted by token, a token's in increasing
// order (the sort is stable); the block of sorted index i works only where a token's run starts,
// finds the run's end by binary search, and each thread adds its column over the run in order,
// from zero, then adds that sum to dwte once: the order, and the bits, of a scan of every position
// per token, without the scan.
__global__ void embedding_dwte_runs_kernel(EmbeddingShape s, int n, const uint32_t* keys,
                                           const int32_t* positions, const float* dout,
                                           float* dwte) {
  const int i = static_cast<int>(blockIdx.x);
  const uint32_t v = keys[i];
  if (v >= static_cast<uint32_t>(s.vocab) || (i > 0 && keys[i - 1] == v)) return;
  int end = i + 1, hi = n;  // the first sorted index past the run: keys[end] > v
  while (end < hi) {
    const int mid = end + (hi - end) / 2;
    if (keys[mid] == v)
      end = mid + 1;
    else
      hi = mid;
  }
  const int j = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (j >= s.dim) return;
  float acc = 0.0f;
  for (int k = i; k < end; ++k) acc += dout[static_cast<size_t>(positions[k]) * s.dim + j];
  dwte[static_cast<size_t>(v) * s.dim + j] += acc;
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
  const size_t positions = static_cast<size_t>(s.batch) * s.seq;
  if (dwte != nullptr && positions > 0) {
    if (positions > static_cast<size_t>(INT_MAX))
      throw std::invalid_argument("embedding_backward_cuda: more than 2^31 - 1 positions a pass");
    const int n = static_cast<int>(positions);
    int bits = 1;  // keys in [0, vocab]
    while (bits < 32 && (uint64_t{1} << bits) <= static_cast<uint64_t>(s.vocab)) ++bits;
    // One scratch: CUB's temporary storage first (kept on 256 bytes), then the keys and positions
    // before and after the sort.
    size_t temp = 0;
    LS_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(
        nullptr, temp, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, bits, stream));
    temp = (temp + 255) / 256 * 256;
    cuda::StreamScratch scratch(temp + 4 * positions * sizeof(int32_t), stream);
    auto* keys_in = reinterpret_cast<uint32_t*>(scratch.as<char>() + temp);
    uint32_t* keys = keys_in + positions;
    auto* pos_in = reinterpret_cast<int32_t*>(keys + positions);
    int32_t* pos = pos_in + positions;
    embedding_sort_input_kernel<<<cuda::grid_for(positions), cuda::kThreads, 0, stream>>>(
        tokens, s.vocab, positions, keys_in, pos_in);
    LS_CHECK_LAUNCH("embedding_sort_input_kernel");
    LS_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(scratch.as<void>(), temp, keys_in, keys, pos_in,
                                                  pos, n, 0, bits, stream));
    const int threads = cuda::threads_for_row(s.dim);
    const dim3 grid(static_cast<unsigned>(n), (s.dim + threads - 1) / threads);
    embedding_dwte_runs_kernel<<<grid, threads, 0, stream>>>(s, n, keys, pos, dout, dwte);
    LS_CHECK_LAUNCH("embedding_dwte_runs_kernel");
  }
  if (dwpe != nullptr) {
    const size_t n = static_cast<size_t>(s.seq) * s.dim;
    embedding_dwpe_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(s, dout, dwpe);
    LS_CHECK_LAUNCH("embedding_dwpe_kernel");
  }
}

}  // namespace lockstep::kernels
