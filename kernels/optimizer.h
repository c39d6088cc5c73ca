// Optimizer updates over flat float32 buffers (all parameters of a model at once), identical on
// every rank. Options are structs, not long scalar lists.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_stream.h"

namespace lockstep::kernels {

// SGD with optional momentum and (coupled, L2) weight decay:
//   g' = g + wd * p;  v = momentum * v + g';  p -= lr * (nesterov ? g' + momentum * v : v)
// With momentum == 0, velocity may be null and p -= lr * g'.
struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};
void sgd_update_cpu(const SgdOptions& o, float* param, const float* grad, float* velocity, size_t n);

// Adam (decoupled == false: weight decay added to the gradient) and AdamW (decoupled == true:
// p -= lr * wd * p). step is 1-based and drives the bias correction.
struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;
  int64_t step = 1;
};
void adam_update_cpu(const AdamOptions& o, float* param, const float* grad, float* m, float* v,
                     size_t n);

// Gradient clipping by global norm: returns the L2 norm of g; scales g by max_norm / norm when the
// norm exceeds max_norm (max_norm <= 0: no clipping).
double global_norm_cpu(const float* g, size_t n);
void scale_cpu(float* x, size_t n, float s);
// Both steps at once, for a gradient held whole on this rank (after the all-reduce): returns the
// norm before clipping.
double clip_by_global_norm_cpu(float* g, size_t n, double max_norm);

// CUDA twins (optimizer.cu): device pointers, one fused elementwise pass each, enqueued on
// `stream`. global_norm_cuda and clip_by_global_norm_cuda return a host value and so wait for the
// stream; the *_device forms keep the norm in device memory (one double) and do not wait. Norms
// are reduced in a fixed order: identical gradients give identical bits on every rank.
void sgd_update_cuda(const SgdOptions& o, float* param, const float* grad, float* velocity,
                     size_t n, cudaStream_t stream);
void adam_update_cuda(const AdamOptions& o, float* param, const float* grad, float* m, float* v,
                      size_t n, cudaStream_t stream);
double global_norm_cuda(const float* g, size_t n, cudaStream_t stream);
void scale_cuda(float* x, size_t n, float s, cudaStream_t stream);
double clip_by_global_norm_cuda(float* g, size_t n, double max_norm, cudaStream_t stream);
void global_norm_device_cuda(const float* g, size_t n, double* norm, cudaStream_t stream);
void clip_by_device_norm_cuda(float* g, size_t n, const double* norm, double max_norm,
                              cudaStream_t stream);

}  // namespace lockstep::kernels
