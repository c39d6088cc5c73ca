#include "kernels/gemm.h"

#include <cblas.h>

#include <stdexcept>

namespace lockstep::kernels {

void gemm_cpu(const GemmShape& s, const float* a, const float* b, float* c) {
  if (s.m < 0 || s.n < 0 || s.k < 0) throw std::invalid_argument("gemm_cpu: negative dimension");
  if (s.m == 0 || s.n == 0) return;
  const int lda = s.trans_a ? s.m : s.k;
  const int ldb = s.trans_b ? s.k : s.n;
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
              s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, s.alpha, a, lda > 0 ? lda : 1,
              b, ldb > 0 ? ldb : 1, s.beta, c, s.n);
}

}  // namespace lockstep::kernels
