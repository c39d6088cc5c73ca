#include "kernels/gemm.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_handle.h"

// cuBLAS is column-major; our matrices are row-major. A row-major m x n matrix read as
// column-major is its n x m transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T:
// swap the operands and the m/n dimensions, and keep each operand's own transpose flag and
// leading dimension.

namespace lockstep::kernels {

namespace {

struct ColumnMajorCall {
  cublasOperation_t op_b, op_a;  // first and second cuBLAS operand: B, then A
  int ld_a, ld_b;
};

ColumnMajorCall prepare(const GemmShape& s, const char* who) {
  if (s.m < 0 || s.n < 0 || s.k < 0)
    throw std::invalid_argument(std::string(who) + ": negative dimension");
  // Leading dimensions of the stored (row-major) operands; cuBLAS wants >= 1 even when k == 0.
  const int lda = s.trans_a ? s.m : s.k;
  const int ldb = s.trans_b ? s.k : s.n;
  return {s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
          lda > 0 ? lda : 1, ldb > 0 ? ldb : 1};
}

}  // namespace

void gemm_cuda(const GemmShape& s, const float* a, const float* b, float* c, cudaStream_t stream) {
  const ColumnMajorCall call = prepare(s, "gemm_cuda");
  if (s.m == 0 || s.n == 0) return;
  LS_CHECK_CUBLAS(cublasSgemm(cublas_handle(stream), call.op_b, call.op_a, s.n, s.m, s.k, &s.alpha,
                              b, call.ld_b, a, call.ld_a, &s.beta, c, s.n));
}

void gemm_bf16_cuda(const GemmShape& s, const uint16_t* a, const uint16_t* b, float* c,
                    cudaStream_t stream) {
  const ColumnMajorCall call = prepare(s, "gemm_bf16_cuda");
  if (s.m == 0 || s.n == 0) return;
  // bf16 products accumulated in fp32 (CUBLAS_COMPUTE_32F) on the tensor cores; C stays fp32.
  LS_CHECK_CUBLAS(cublasGemmEx(cublas_handle(stream), call.op_b, call.op_a, s.n, s.m, s.k, &s.alpha,
                               b, CUDA_R_16BF, call.ld_b, a, CUDA_R_16BF, call.ld_a, &s.beta, c,
                               CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace lockstep::kernels
