// Stands in for the CUDA twins (*.cu) when CUDA is not built, so callers carry no #ifdef: the
// device count is 0 with the reason, frees do nothing, and every other *_cuda function throws.
#include <stdexcept>
#include <string>

#include "kernels/activation.h"
#include "kernels/cast.h"
#include "kernels/conv2d.h"
#include "kernels/cuda_info.h"
#include "kernels/cuda_memory.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/loss.h"
#include "kernels/optimizer.h"
#include "kernels/pool.h"

namespace lockstep::kernels {

namespace {

[[noreturn]] void not_built(const char* what) {
  throw std::runtime_error(std::string(what) +
                           " needs the CUDA build (configure with -DLOCKSTEP_CUDA=ON)");
}

}  // namespace

int cuda_device_count_or_reason(std::string* reason) {
  if (reason != nullptr) *reason = "built without CUDA (LOCKSTEP_CUDA=OFF)";
  return 0;
}

void* cuda_alloc(size_t) { not_built("cuda_alloc"); }
void cuda_free(void*) noexcept {}
void cuda_copy_to_device(void*, const void*, size_t) { not_built("cuda_copy_to_device"); }
void cuda_copy_to_host(void*, const void*, size_t) { not_built("cuda_copy_to_host"); }
void cuda_zero(void*, size_t, cudaStream_t) { not_built("cuda_zero"); }
cudaStream_t cuda_stream_create() { not_built("cuda_stream_create"); }
void cuda_stream_destroy(cudaStream_t) noexcept {}
void cuda_stream_synchronize(cudaStream_t) { not_built("cuda_stream_synchronize"); }
void* cuda_host_alloc(size_t) { not_built("cuda_host_alloc"); }
void cuda_host_free(void*) noexcept {}
void cuda_copy_to_device_async(void*, const void*, size_t, cudaStream_t) {
  not_built("cuda_copy_to_device_async");
}
void cuda_copy_to_host_async(void*, const void*, size_t, cudaStream_t) {
  not_built("cuda_copy_to_host_async");
}
cudaEvent_t cuda_event_create() { not_built("cuda_event_create"); }
void cuda_event_destroy(cudaEvent_t) noexcept {}
void cuda_event_record(cudaEvent_t, cudaStream_t) { not_built("cuda_event_record"); }
void cuda_stream_wait_event(cudaStream_t, cudaEvent_t) { not_built("cuda_stream_wait_event"); }
void cuda_event_synchronize(cudaEvent_t) { not_built("cuda_event_synchronize"); }
cudaEvent_t cuda_timing_event_create() { not_built("cuda_timing_event_create"); }
float cuda_event_elapsed_ms(cudaEvent_t, cudaEvent_t) { not_built("cuda_event_elapsed_ms"); }

void gemm_cuda(const GemmShape&, const float*, const float*, float*, cudaStream_t) {
  not_built("gemm_cuda");
}
void gemm_bf16_cuda(const GemmShape&, const uint16_t*, const uint16_t*, float*, cudaStream_t) {
  not_built("gemm_bf16_cuda");
}

void cast_f32_to_bf16_cuda(const float*, uint16_t*, size_t, cudaStream_t) {
  not_built("cast_f32_to_bf16_cuda");
}
void cast_bf16_to_f32_cuda(const uint16_t*, float*, size_t, cudaStream_t) {
  not_built("cast_bf16_to_f32_cuda");
}

void dense_forward_cuda(const DenseShape&, const float*, const float*, const float*, float*,
                        cudaStream_t) {
  not_built("dense_forward_cuda");
}
void dense_backward_cuda(const DenseShape&, const float*, const float*, const float*, float*,
                         float*, float*, cudaStream_t) {
  not_built("dense_backward_cuda");
}

void dense_forward_bf16_cuda(const DenseShape&, const float*, const uint16_t*, const float*, float*,
                             uint16_t*, cudaStream_t) {
  not_built("dense_forward_bf16_cuda");
}
void dense_backward_bf16_cuda(const DenseShape&, const uint16_t*, const uint16_t*, const float*,
                              float*, float*, float*, uint16_t*, cudaStream_t) {
  not_built("dense_backward_bf16_cuda");
}

void conv2d_forward_cuda(const Conv2dShape&, const float*, const float*, const float*, float*,
                         float*, cudaStream_t) {
  not_built("conv2d_forward_cuda");
}
void conv2d_backward_cuda(const Conv2dShape&, const float*, const float*, const float*, float*,
                          float*, float*, float*, cudaStream_t) {
  not_built("conv2d_backward_cuda");
}
void conv2d_forward_bf16_cuda(const Conv2dShape&, const float*, const uint16_t*, const float*,
                              float*, float*, cudaStream_t) {
  not_built("conv2d_forward_bf16_cuda");
}
void conv2d_backward_bf16_cuda(const Conv2dShape&, const float*, const uint16_t*, const float*,
                               float*, float*, float*, float*, cudaStream_t) {
  not_built("conv2d_backward_bf16_cuda");
}

void maxpool_forward_cuda(const PoolShape&, const float*, float*, int32_t*, cudaStream_t) {
  not_built("maxpool_forward_cuda");
}
void maxpool_backward_cuda(const PoolShape&, const float*, const int32_t*, float*, cudaStream_t) {
  not_built("maxpool_backward_cuda");
}

void relu_forward_cuda(const float*, float*, size_t, cudaStream_t) {
  not_built("relu_forward_cuda");
}
void relu_backward_cuda(const float*, const float*, float*, size_t, cudaStream_t) {
  not_built("relu_backward_cuda");
}

void softmax_cross_entropy_sums_cuda(const float*, const int32_t*, const float*, int, int, float,
                                     float*, LossTotals*, cudaStream_t) {
  not_built("softmax_cross_entropy_sums_cuda");
}
LossTotals softmax_cross_entropy_cuda(const float*, const int32_t*, const float*, int, int, float,
                                      float*, cudaStream_t) {
  not_built("softmax_cross_entropy_cuda");
}
void mse_sums_cuda(const float*, const float*, const float*, int, int, float, float*, LossTotals*,
                   cudaStream_t) {
  not_built("mse_sums_cuda");
}
LossTotals mse_cuda(const float*, const float*, const float*, int, int, float, float*,
                    cudaStream_t) {
  not_built("mse_cuda");
}

void sgd_update_cuda(const SgdOptions&, float*, const float*, float*, size_t, cudaStream_t) {
  not_built("sgd_update_cuda");
}
void adam_update_cuda(const AdamOptions&, float*, const float*, float*, float*, size_t,
                      cudaStream_t) {
  not_built("adam_update_cuda");
}
double global_norm_cuda(const float*, size_t, cudaStream_t) { not_built("global_norm_cuda"); }
void scale_cuda(float*, size_t, float, cudaStream_t) { not_built("scale_cuda"); }
double clip_by_global_norm_cuda(float*, size_t, double, cudaStream_t) {
  not_built("clip_by_global_norm_cuda");
}
void global_norm_device_cuda(const float*, size_t, double*, cudaStream_t) {
  not_built("global_norm_device_cuda");
}
void clip_by_device_norm_cuda(float*, size_t, const double*, double, cudaStream_t) {
  not_built("clip_by_device_norm_cuda");
}

}  // namespace lockstep::kernels
