#include "kernels/cuda/bias.cuh"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kColumns = 32;    // columns per block: one warp reads 32 neighbouring floats
constexpr int kRowLanes = 8;    // threads per column inside a block
constexpr size_t kChunkRows = 64;  // rows per block in the first pass
constexpr size_t kMaxChunks = 256;

__global__ void fill_rows_kernel(float* __restrict__ y, const float* __restrict__ b, size_t total,
                                 int cols) {
  for (size_t i = thread_index(); i < total; i += thread_stride()) y[i] = b[i % cols];
}

// Pass 1: block (x, chunk) sums rows [chunk * chunk_rows, ...) of columns [x * 32 V, x * 32 V +
// 32 V) into partial[chunk, col], V neighbouring columns a thread (V = 4: 16-byte loads, where the
// shape and pointers allow). Threads of one column take rows lane, lane + 8, ...; the 8 lanes are
// then added in lane order, so the result does not depend on scheduling, nor on V. With dy16,
// each value read is also written there in bf16 (the cast the bf16 GEMMs need), so the gradient
// is read once for both.
template <int V>
__global__ void column_partials_kernel(const float* __restrict__ dy, size_t rows, int cols,
                                       size_t chunk_rows, float* __restrict__ partial,
                                       uint16_t* __restrict__ dy16) {
  __shared__ float lanes[kRowLanes][kColumns * V];
  const int col = (blockIdx.x * kColumns + threadIdx.x) * V;  // V | cols: all V or none in range
  const size_t begin = blockIdx.y * chunk_rows;
  const size_t end = min(rows, begin + chunk_rows);
  float acc[V] = {};
  if (col < cols) {
#pragma unroll 4
    for (size_t r = begin + threadIdx.y; r < end; r += kRowLanes) {
      const size_t at = r * cols + col;
      float v[V];
      if constexpr (V == 4) {
        const float4 q = *reinterpret_cast<const float4*>(dy + at);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
        v[0] = dy[at];
      }
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += v[i];
      if (dy16 != nullptr) {
        if constexpr (V == 4)
          *reinterpret_cast<uint2*>(dy16 + at) =
              make_uint2(to_bf16(v[0]) | (uint32_t(to_bf16(v[1])) << 16),
                         to_bf16(v[2]) | (uint32_t(to_bf16(v[3])) << 16));
        else
          dy16[at] = to_bf16(v[0]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) lanes[threadIdx.y][threadIdx.x * V + i] = acc[i];
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float sum = 0.0f;
      for (int lane = 0; lane < kRowLanes; ++lane) sum += lanes[lane][threadIdx.x * V + i];
      partial[blockIdx.y * size_t(cols) + col + i] = sum;
    }
  }
}

// Pass 2: db[col] += the chunks' partials, in chunk order.
__global__ void column_finish_kernel(const float* __restrict__ partial, int chunks, int cols,
                                     float* __restrict__ db) {
  for (size_t col = thread_index(); col < size_t(cols); col += thread_stride()) {
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) sum += partial[c * size_t(cols) + col];
    db[col] += sum;
  }
}

}  // namespace

void fill_rows(float* y, const float* b, size_t rows, int cols, cudaStream_t stream) {
  const size_t total = rows * cols;
  if (total == 0) return;
  fill_rows_kernel<<<grid_for(total), kThreads, 0, stream>>>(y, b, total, cols);
  LS_CHECK_LAUNCH("fill_rows_kernel");
}

void add_column_sums(const float* dy, size_t rows, int cols, float* db, cudaStream_t stream,
                     uint16_t* dy16) {
  if (rows == 0 || cols <= 0) return;
  // Chunks depend only on the shape, so the summation order (and the bits) is the same every call.
  const size_t chunks =
      std::min(kMaxChunks, std::max<size_t>(1, (rows + kChunkRows - 1) / kChunkRows));
  const size_t chunk_rows = (rows + chunks - 1) / chunks;
  StreamScratch partial(chunks * cols * sizeof(float), stream);
  const bool quads = cols % 4 == 0 && reinterpret_cast<uintptr_t>(dy) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(dy16) % 8 == 0;
  const int per_block = kColumns * (quads ? 4 : 1);
  const dim3 grid((cols + per_block - 1) / per_block, static_cast<unsigned>(chunks));
  if (quads)
    column_partials_kernel<4><<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(
        dy, rows, cols, chunk_rows, partial.as<float>(), dy16);
  else
    column_partials_kernel<1><<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(
        dy, rows, cols, chunk_rows, partial.as<float>(), dy16);
  LS_CHECK_LAUNCH("column_partials_kernel");
  column_finish_kernel<<<grid_for(cols), kThreads, 0, stream>>>(
      partial.as<float>(), static_cast<int>(chunks), cols, db);
  LS_CHECK_LAUNCH("column_finish_kernel");
}

}  // namespace lockstep::kernels::cuda
