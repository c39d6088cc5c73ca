#include <stdexcept>

#include "kernels/cast.h"
#include "kernels/cuda/bias.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/memory.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"

// The same three gemms as dense.cpp, on cuBLAS; the bias goes through the shared bias helpers.

namespace lockstep::kernels {

void dense_forward_cuda(const DenseShape& s, const float* x, const float* w, const float* b,
                        float* y, cudaStream_t stream) {
  check_dense_shape(s, "dense_forward_cuda");
  if (s.batch == 0) return;
  // Seed y with the bias rows; the gemm then adds x.w on top with beta = 1.
  float beta = 0.0f;
  if (b != nullptr) {
    cuda::fill_rows(y, b, static_cast<size_t>(s.batch), s.out, stream);
    beta = 1.0f;
  }
  gemm_cuda({.m = s.batch, .n = s.out, .k = s.in, .beta = beta}, x, w, y, stream);
}

void dense_backward_cuda(const DenseShape& s, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db, cudaStream_t stream) {
  check_dense_shape(s, "dense_backward_cuda");
  if (s.batch == 0) return;
  if (dx != nullptr)  // dx[batch, in] = dy[batch, out] . w[in, out]^T
    gemm_cuda({.m = s.batch, .n = s.in, .k = s.out, .trans_b = true}, dy, w, dx, stream);
  if (dw != nullptr)  // dw[in, out] += x[batch, in]^T . dy[batch, out]
    gemm_cuda({.m = s.in, .n = s.out, .k = s.batch, .trans_a = true, .beta = 1.0f}, x, dy, dw,
              stream);
  if (db != nullptr) cuda::add_column_sums(dy, static_cast<size_t>(s.batch), s.out, db, stream);
}

// The same GEMMs in bf16. The casts are passes of their own; fusing the cast of x into the kernel
// that produced it (relu, maxpool) would save one read and write of the activation.
void dense_forward_bf16_cuda(const DenseShape& s, const float* x, const uint16_t* w16,
                             const float* b, float* y, uint16_t* x16, cudaStream_t stream,
                             const float* residual) {
  check_dense_shape(s, "dense_forward_bf16_cuda");
  if (s.batch == 0) return;
  if (x != nullptr) cast_f32_to_bf16_cuda(x, x16, static_cast<size_t>(s.batch) * s.in, stream);
  const GemmShape g{.m = s.batch, .n = s.out, .k = s.in, .beta = residual != nullptr ? 1.0f : 0.0f};
  if (b != nullptr) {  // the bias (and the residual) in the GEMM's epilogue
    gemm_bf16_bias_cuda(g, x16, w16, b, y, stream, residual);
    return;
  }
  if (residual != nullptr)
    cuda_copy_on_device_async(y, residual, static_cast<size_t>(s.batch) * s.out * sizeof(float),
                              stream);
  gemm_bf16_cuda(g, x16, w16, y, stream);
}

void dense_backward_bf16_cuda(const DenseShape& s, const uint16_t* x16, const uint16_t* w16,
                              const float* dy, float* dx, float* dw, float* db, uint16_t* dy16,
                              cudaStream_t stream, uint16_t* dx16) {
  check_dense_shape(s, "dense_backward_bf16_cuda");
  if (dx != nullptr && dx16 != nullptr)
    throw std::invalid_argument("dense_backward_bf16_cuda: dx and dx16 both given");
  if (s.batch == 0) return;
  const bool products = dx != nullptr || dx16 != nullptr || dw != nullptr;
  // The bias gradient's column sums and dy's cast in one pass over dy; or over the bf16 words.
  if (dy == nullptr && db != nullptr)
    cuda::add_column_sums_of(cuda::ColumnWords{dy16}, static_cast<size_t>(s.batch), s.out, db,
                             stream, nullptr);
  else if (db != nullptr)
    cuda::add_column_sums(dy, static_cast<size_t>(s.batch), s.out, db, stream,
                          products ? dy16 : nullptr);
  else if (products && dy != nullptr)
    cast_f32_to_bf16_cuda(dy, dy16, static_cast<size_t>(s.batch) * s.out, stream);
  const GemmShape gx{.m = s.batch, .n = s.in, .k = s.out, .trans_b = true};
  if (dx != nullptr) gemm_bf16_cuda(gx, dy16, w16, dx, stream);
  if (dx16 != nullptr) gemm_bf16_out_cuda(gx, dy16, w16, dx16, stream);
  if (dw != nullptr)
    gemm_bf16_cuda({.m = s.in, .n = s.out, .k = s.batch, .trans_a = true, .beta = 1.0f}, x16, dy16,
                   dw, stream);
}

void dense_forward_bf16_out_cuda(const DenseShape& s, const uint16_t* x16, const uint16_t* w16,
                                 const uint16_t* b16, const float* b, uint16_t* y16,
                                 cudaStream_t stream) {
  check_dense_shape(s, "dense_forward_bf16_out_cuda");
  if (b16 == nullptr || b == nullptr)
    throw std::invalid_argument("dense_forward_bf16_out_cuda: the bias is needed in both types");
  if (s.batch == 0) return;
  const GemmShape g{.m = s.batch, .n = s.out, .k = s.in};
  if (gemm_bf16_bias_out_cuda(g, x16, w16, b16, y16, stream)) return;
  const size_t n = static_cast<size_t>(s.batch) * s.out;
  cuda::StreamScratch y(n * sizeof(float), stream);
  gemm_bf16_bias_cuda(g, x16, w16, b, y.as<float>(), stream);
  cast_f32_to_bf16_cuda(y.as<float>(), y16, n, stream);
}

}  // namespace lockstep::kernels
