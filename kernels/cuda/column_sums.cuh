// Deterministic column sums of a row-major [rows, cols] matrix whose values a loader computes
// (for *.cu files only): db[j] += sum over r of v(r, j), and optionally every value written in
// bf16 (cast.h's words) in the same pass. bias.cu sums a stored gradient with it (the bias
// gradient of dense and conv, the layer norm's parameters); gelu.cu sums the GELU's backward
// values as it computes them, so that the MLP's hidden gradient is read once and never stored in
// fp32.
//
// A loader is a copyable value with (row r, at = r * cols + j)
//   template <int V> __device__ void operator()(size_t r, size_t at, float (&v)[V]) const;
//   bool aligned() const;  // every pointer it reads 16-byte aligned
// giving the values at at, at + 1, ..., at + V - 1 (V = 1 or 4; 4 only when aligned() and cols is
// a multiple of 4). The order of additions depends only on rows and cols: fixed row chunks, rows
// lane, lane + 8, ... inside a chunk, the 8 lanes added in lane order; the chunks' sums likewise,
// chunks lane, lane + 8, ..., then the lanes in order; so the bits depend neither on V nor on
// scheduling.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace column_sums {

constexpr int kColumns = 32;       // column groups a block: one warp reads neighbouring floats
constexpr int kRowLanes = 8;       // threads per column group inside a block
constexpr size_t kChunkRows = 64;  // rows per block in the first pass
constexpr size_t kMaxChunks = 256;

// Pass 1: block (x, chunk) sums rows [chunk * chunk_rows, ...) of columns [x * 32 V, x * 32 V +
// 32 V) into partial[chunk, col], V neighbouring columns a thread.
template <int V, class Load>
__global__ void partials_kernel(Load load, size_t rows, int cols, size_t chunk_rows,
                                float* __restrict__ partial, uint16_t* __restrict__ out16) {
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
      load.template operator()<V>(r, at, v);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += v[i];
      if (out16 != nullptr) {
        if constexpr (V == 4)
          *reinterpret_cast<uint2*>(out16 + at) =
              make_uint2(to_bf16(v[0]) | (uint32_t(to_bf16(v[1])) << 16),
                         to_bf16(v[2]) | (uint32_t(to_bf16(v[3])) << 16));
        else
          out16[at] = to_bf16(v[0]);
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

// Pass 2: db[col] += the chunks' partials (chunk c's at partial[c * stride + col]), as pass 1 adds
// rows: block x takes 32 columns, lane l of a column the chunks l, l + 8, ..., then the 8 lanes in
// lane order (a fixed order, and 8 threads a column rather than one walking up to 256 chunks).
// Columns from `split` on go to db_hi[col - split] instead (two gradients in one launch). Also the
// second pass of other kernels' column partials (layernorm.cu's dgamma and dbeta).
template <int Unused = 0>
__global__ void finish_kernel(const float* __restrict__ partial, int chunks, int cols,
                              size_t stride, float* __restrict__ db, int split,
                              float* __restrict__ db_hi) {
  __shared__ float lanes[kRowLanes][kColumns];
  const int col = blockIdx.x * kColumns + threadIdx.x;
  float sum = 0.0f;
  if (col < cols)
    for (int c = threadIdx.y; c < chunks; c += kRowLanes) sum += partial[c * stride + col];
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += lanes[lane][threadIdx.x];
    if (col < split)
      db[col] += total;
    else
      db_hi[col - split] += total;
  }
}

}  // namespace column_sums

// The loader of a stored matrix.
struct ColumnValues {
  const float* values;
  template <int V>
  __device__ void operator()(size_t, size_t at, float (&v)[V]) const {
    if constexpr (V == 4) {
      const float4 q = *reinterpret_cast<const float4*>(values + at);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
      v[0] = values[at];
    }
  }
  bool aligned() const { return reinterpret_cast<uintptr_t>(values) % 16 == 0; }
};

// The loader of a stored matrix of bf16 words, each widened: the sums of their fp32 values, the
// same bits as ColumnValues over a widened copy (the order does not depend on the loader).
struct ColumnWords {
  const uint16_t* words;
  template <int V>
  __device__ void operator()(size_t, size_t at, float (&v)[V]) const {
    if constexpr (V == 4) {
      const uint2 q = *reinterpret_cast<const uint2*>(words + at);
      v[0] = from_bf16(uint16_t(q.x & 0xffffu)), v[1] = from_bf16(uint16_t(q.x >> 16));
      v[2] = from_bf16(uint16_t(q.y & 0xffffu)), v[3] = from_bf16(uint16_t(q.y >> 16));
    } else {
      v[0] = from_bf16(words[at]);
    }
  }
  bool aligned() const { return reinterpret_cast<uintptr_t>(words) % 8 == 0; }
};

// db[j] += the sum of partial[c * stride + j] over the chunks c < chunks, in finish_kernel's order;
// with db_hi, the columns j >= split go to db_hi[j - split] instead.
inline void add_column_partials(const float* partial, size_t chunks, int cols, size_t stride,
                                float* db, cudaStream_t stream, int split = -1,
                                float* db_hi = nullptr) {
  using namespace column_sums;
  finish_kernel<<<(cols + kColumns - 1) / kColumns, dim3(kColumns, kRowLanes), 0, stream>>>(
      partial, static_cast<int>(chunks), cols, stride, db, db_hi != nullptr ? split : cols, db_hi);
  LS_CHECK_LAUNCH("column_sums::finish_kernel");
}

// db[j] += sum over r < rows of load's v(r, j); with out16, out16[r, j] = v(r, j) in bf16.
template <class Load>
void add_column_sums_of(const Load& load, size_t rows, int cols, float* db, cudaStream_t stream,
                        uint16_t* out16) {
  using namespace column_sums;
  if (rows == 0 || cols <= 0) return;
  // Chunks depend only on the shape, so the summation order (and the bits) is the same every call.
  const size_t chunks =
      std::min(kMaxChunks, std::max<size_t>(1, (rows + kChunkRows - 1) / kChunkRows));
  const size_t chunk_rows = (rows + chunks - 1) / chunks;
  StreamScratch partial(chunks * cols * sizeof(float), stream);
  const bool quads = cols % 4 == 0 && load.aligned() && reinterpret_cast<uintptr_t>(out16) % 8 == 0;
  const int per_block = kColumns * (quads ? 4 : 1);
  const dim3 grid((cols + per_block - 1) / per_block, static_cast<unsigned>(chunks));
  if (quads)
    partials_kernel<4><<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(load, rows, cols, chunk_rows,
                                                                       partial.as<float>(), out16);
  else
    partials_kernel<1><<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(load, rows, cols, chunk_rows,
                                                                       partial.as<float>(), out16);
  LS_CHECK_LAUNCH("column_sums::partials_kernel");
  add_column_partials(partial.as<float>(), chunks, cols, static_cast<size_t>(cols), db, stream);
}

}  // namespace lockstep::kernels::cuda
