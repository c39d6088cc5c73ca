// Dense (fully connected) layer on row-major float32: y[batch, out] = x[batch, in] . w[in, out] + b[out].
// Backward: dx = dy . w^T (overwritten; skipped when dx is null), dw += x^T . dy, db += sum_rows(dy)
// (accumulated, so micro-batches can add into one gradient buffer).
#pragma once

#include "kernels/cuda_stream.h"

namespace lockstep::kernels {

struct DenseShape {
  int batch = 0, in = 0, out = 0;
};

void dense_forward_cpu(const DenseShape& s, const float* x, const float* w, const float* b, float* y);
void dense_backward_cpu(const DenseShape& s, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db);

// CUDA twins (dense.cu): device pointers, same contract, enqueued on `stream`.
void dense_forward_cuda(const DenseShape& s, const float* x, const float* w, const float* b,
                        float* y, cudaStream_t stream);
void dense_backward_cuda(const DenseShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db, cudaStream_t stream);

}  // namespace lockstep::kernels
