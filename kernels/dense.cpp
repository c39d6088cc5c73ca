#include "kernels/dense.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/gemm.h"

namespace lockstep::kernels {

void check_dense_shape(const DenseShape& s, const char* who) {
  if (s.batch < 0 || s.in <= 0 || s.out <= 0)
    throw std::invalid_argument(std::string(who) + ": batch must be >= 0 and in, out > 0");
}

namespace {

using Gemm = void (*)(const GemmShape&, const float*, const float*, float*);

// Both twins are these three products; only the GEMM differs (OpenBLAS or oneDNN).
void forward(Gemm gemm, const DenseShape& s, const float* x, const float* w, const float* b,
             float* y) {
  if (s.batch == 0) return;
  // Seed y with the bias rows so that one gemm with beta = 1 adds x.w on top: no second pass.
  float beta = 0.0f;
  if (b != nullptr) {
    for (int i = 0; i < s.batch; ++i) std::copy_n(b, s.out, y + static_cast<size_t>(i) * s.out);
    beta = 1.0f;
  }
  gemm({.m = s.batch, .n = s.out, .k = s.in, .beta = beta}, x, w, y);
}

void backward(Gemm gemm, const DenseShape& s, const float* x, const float* w, const float* dy,
              float* dx, float* dw, float* db) {
  if (s.batch == 0) return;
  if (dx != nullptr)  // dx[batch, in] = dy[batch, out] . w[in, out]^T
    gemm({.m = s.batch, .n = s.in, .k = s.out, .trans_b = true}, dy, w, dx);
  if (dw != nullptr)  // dw[in, out] += x[batch, in]^T . dy[batch, out]
    gemm({.m = s.in, .n = s.out, .k = s.batch, .trans_a = true, .beta = 1.0f}, x, dy, dw);
  if (db != nullptr) {
    for (int i = 0; i < s.batch; ++i) {
      const float* row = dy + static_cast<size_t>(i) * s.out;
      for (int j = 0; j < s.out; ++j) db[j] += row[j];
    }
  }
}

}  // namespace

void dense_forward_cpu(const DenseShape& s, const float* x, const float* w, const float* b,
                       float* y) {
  check_dense_shape(s, "dense_forward_cpu");
  forward(gemm_cpu, s, x, w, b, y);
}

void dense_backward_cpu(const DenseShape& s, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db) {
  check_dense_shape(s, "dense_backward_cpu");
  backward(gemm_cpu, s, x, w, dy, dx, dw, db);
}

void dense_forward_onednn(const DenseShape& s, const float* x, const float* w, const float* b,
                          float* y) {
  check_dense_shape(s, "dense_forward_onednn");
  if (b == nullptr || s.batch == 0) {
    forward(gemm_onednn, s, x, w, b, y);
    return;
  }
  // The bias as the matmul's own operand: no seeding pass over y, and y is not read.
  gemm_bias_onednn({.m = s.batch, .n = s.out, .k = s.in}, x, w, b, y);
}

void dense_backward_onednn(const DenseShape& s, const float* x, const float* w, const float* dy,
                           float* dx, float* dw, float* db) {
  check_dense_shape(s, "dense_backward_onednn");
  backward(gemm_onednn, s, x, w, dy, dx, dw, db);
}

}  // namespace lockstep::kernels
