// Bias helpers shared by the dense and conv2d CUDA twins (internal to *.cu files): broadcast a bias
// row into every row of an output, and add the column sums of a gradient into the bias gradient.
// Both enqueue on `stream`. The column sums are deterministic: fixed row chunks and lanes, added in
// a fixed order (column_sums.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace lockstep::kernels::cuda {

// y[r, j] = b[j] for r < rows, j < cols.
void fill_rows(float* y, const float* b, size_t rows, int cols, cudaStream_t stream);

// y[r, j] += b[j] for r < rows, j < cols.
void add_rows(float* y, const float* b, size_t rows, int cols, cudaStream_t stream);

// db[j] += sum over r < rows of dy[r, j]; with dy16, also dy16 = dy in bf16 (cast.h's words) in
// the same pass over dy. db's bits do not depend on dy16.
void add_column_sums(const float* dy, size_t rows, int cols, float* db, cudaStream_t stream,
                     uint16_t* dy16 = nullptr);

}  // namespace lockstep::kernels::cuda
