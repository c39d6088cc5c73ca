#include <algorithm>
#include <cstdint>

#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

__global__ void fill_rows_kernel(float* __restrict__ y, const float* __restrict__ b, size_t total,
                                 int cols) {
  for (size_t i = thread_index(); i < total; i += thread_stride()) y[i] = b[i % cols];
}

__global__ void add_rows_kernel(float* __restrict__ y, const float* __restrict__ b, size_t total,
                                int cols) {
  for (size_t i = thread_index(); i < total; i += thread_stride()) y[i] += b[i % cols];
}

}  // namespace

void fill_rows(float* y, const float* b, size_t rows, int cols, cudaStream_t stream) {
  const size_t total = rows * cols;
  if (total == 0) return;
  fill_rows_kernel<<<grid_for(total), kThreads, 0, stream>>>(y, b, total, cols);
  LS_CHECK_LAUNCH("fill_rows_kernel");
}

void add_rows(float* y, const float* b, size_t rows, int cols, cudaStream_t stream) {
  const size_t total = rows * cols;
  if (total == 0) return;
  add_rows_kernel<<<grid_for(total), kThreads, 0, stream>>>(y, b, total, cols);
  LS_CHECK_LAUNCH("add_rows_kernel");
}

void add_column_sums(const float* dy, size_t rows, int cols, float* db, cudaStream_t stream,
                     uint16_t* dy16) {
  add_column_sums_of(ColumnValues{dy}, rows, cols, db, stream, dy16);
}

}  // namespace lockstep::kernels::cuda
