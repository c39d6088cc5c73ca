// General matrix multiply on row-major float32 matrices: C = alpha * op(A) op(B) + beta * C,
// where op(X) is X or its transpose. op(A) is m x k, op(B) is k x n, C is m x n. The CPU twin goes
// through the optimised BLAS (cblas_sgemm); the CUDA twin (gemm_cuda) through cuBLAS.
#pragma once

#include <cstddef>

namespace lockstep::kernels {

struct GemmShape {
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
};

void gemm_cpu(const GemmShape& s, const float* a, const float* b, float* c);

}  // namespace lockstep::kernels
