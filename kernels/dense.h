// Dense (fully connected) layer on row-major float32: y[batch, out] = x[batch, in] . w[in, out] + b[out].
// Backward: dx = dy . w^T (overwritten; skipped when dx is null), dw += x^T . dy, db += sum_rows(dy)
// (accumulated, so micro-batches can add into one gradient buffer).
#pragma once

namespace lockstep::kernels {

struct DenseShape {
  int batch = 0, in = 0, out = 0;
};

void dense_forward_cpu(const DenseShape& s, const float* x, const float* w, const float* b, float* y);
void dense_backward_cpu(const DenseShape& s, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db);

}  // namespace lockstep::kernels
