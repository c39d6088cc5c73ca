#include "kernels/dense.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace lockstep::kernels {

void check_dense_shape(const DenseShape& s, const char* who) {
  if (s.batch < 0 || s.in <= 0 || s.out <= 0)
    throw std::invalid_argument(std::string(who) + ": batch must be >= 0 and in, out > 0");
}

namespace {

using Gemm = void (*)(const GemmShape&, const float*, const float*, float*);

constexpr int kBiasColumns = 64;  // the bias gradient's block: four cache lines of each row

// db[j] += dy[i][j] for every row i in order, column blocks [b0, b1) of kBiasColumns: each
// column's sum starts from db[j] and adds the rows one by one, so the bits are those of a plain
// row-by-row loop at any thread count, while a block's sums stay in vector registers.
template <int kWidth>
LS_ALWAYS_INLINE void bias_block(const DenseShape& s, int j0, int width, const float* dy,
                                 float* db) {
  const int n = kWidth > 0 ? kWidth : width;
  float acc[kBiasColumns];
  for (int l = 0; l < n; ++l) acc[l] = db[j0 + l];
  for (int i = 0; i < s.batch; ++i) {
    const float* row = dy + static_cast<size_t>(i) * s.out + j0;
    for (int l = 0; l < n; ++l) acc[l] += row[l];
  }
  for (int l = 0; l < n; ++l) db[j0 + l] = acc[l];
}

void bias_gradient(const DenseShape& s, const float* dy, float* db, size_t b0, size_t b1) {
  widest_build([=](auto) LS_BUILD_LAMBDA {
    for (size_t b = b0; b < b1; ++b) {
      const int j0 = static_cast<int>(b) * kBiasColumns, width = std::min(kBiasColumns, s.out - j0);
      if (width == kBiasColumns)
        bias_block<kBiasColumns>(s, j0, width, dy, db);
      else
        bias_block<0>(s, j0, width, dy, db);
    }
  });
}

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
    const size_t blocks = static_cast<size_t>(s.out + kBiasColumns - 1) / kBiasColumns;
    parallel_chunks(blocks, 1, [&](size_t b0, size_t b1) { bias_gradient(s, dy, db, b0, b1); });
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
