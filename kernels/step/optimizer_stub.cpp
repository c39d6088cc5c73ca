// Stands in for optimizer.cu when CUDA is not built: every *_cuda function throws.
#include "kernels/cuda/stub.h"
#include "kernels/step/optimizer.h"

namespace lockstep::kernels {

void sgd_update_cuda(const SgdOptions&, float*, const float*, float*, size_t, cudaStream_t,
                     uint16_t*) {
  cuda_not_built("sgd_update_cuda");
}
void adam_update_cuda(const AdamOptions&, float*, const float*, float*, float*, size_t,
                      cudaStream_t, uint16_t*) {
  cuda_not_built("adam_update_cuda");
}
double global_norm_cuda(const float*, size_t, cudaStream_t) { cuda_not_built("global_norm_cuda"); }
void scale_cuda(float*, size_t, float, cudaStream_t) { cuda_not_built("scale_cuda"); }
double clip_by_global_norm_cuda(float*, size_t, double, cudaStream_t) {
  cuda_not_built("clip_by_global_norm_cuda");
}
void global_norm_device_cuda(const float*, size_t, double*, cudaStream_t) {
  cuda_not_built("global_norm_device_cuda");
}
void clip_by_device_norm_cuda(float*, size_t, const double*, double, cudaStream_t) {
  cuda_not_built("clip_by_device_norm_cuda");
}
void sum_of_squares_device_cuda(const double*, int, double*, cudaStream_t) {
  cuda_not_built("sum_of_squares_device_cuda");
}
void sqrt_device_cuda(double*, cudaStream_t) { cuda_not_built("sqrt_device_cuda"); }
void gated_update_cuda(const UpdateCoefficients*, const double*, int, float*, const float*, float*,
                       float*, size_t, cudaStream_t, uint16_t*) {
  cuda_not_built("gated_update_cuda");
}

}  // namespace lockstep::kernels
