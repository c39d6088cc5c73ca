// Optimizer updates over flat float32 buffers (all parameters of a model at once), identical on
// every rank. Options are structs, not long scalar lists. The CPU updates and scale_cpu run over
// the rank's threads (kernels/parallel.h): elementwise, so the same bits at any thread count.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

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
void sgd_update_cpu(const SgdOptions& o, float* param, const float* grad, float* velocity,
                    size_t n);

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
// are reduced in a fixed order: identical gradients give identical bits on every rank. The
// updates' param16, where not null, receives the updated parameters' bf16 words in the same pass
// (the words cast_f32_to_bf16_cuda would write from param afterwards: a bf16 run's one weight
// copy, Model::params16).
void sgd_update_cuda(const SgdOptions& o, float* param, const float* grad, float* velocity,
                     size_t n, cudaStream_t stream, uint16_t* param16 = nullptr);
void adam_update_cuda(const AdamOptions& o, float* param, const float* grad, float* m, float* v,
                      size_t n, cudaStream_t stream, uint16_t* param16 = nullptr);
double global_norm_cuda(const float* g, size_t n, cudaStream_t stream);
void scale_cuda(float* x, size_t n, float s, cudaStream_t stream);
double clip_by_global_norm_cuda(float* g, size_t n, double max_norm, cudaStream_t stream);
void global_norm_device_cuda(const float* g, size_t n, double* norm, cudaStream_t stream);
void clip_by_device_norm_cuda(float* g, size_t n, const double* norm, double max_norm,
                              cudaStream_t stream);
// A norm over pieces on the device (ZeRO's shards, runtime/train/zero.h): *squares = the sum of
// norms[i]^2 for i in [0, count) in order, each product and sum rounded as a host loop rounds
// them (no fused multiply-add); then sqrt_device_cuda takes its square root in place.
void sum_of_squares_device_cuda(const double* norms, int count, double* squares,
                                cudaStream_t stream);
void sqrt_device_cuda(double* x, cudaStream_t stream);

// Updates captured in a CUDA graph (the training step replayed as one launch): a graph replays its
// kernels with the arguments they were captured with, so the values that change from step to step
// (the learning rate, Adam's bias corrections) are read from device memory, which the caller
// rewrites before each replay, and the update is skipped on the device when one of
// gate[0, gates) is not finite (the step's loss totals and gradient norm, computed earlier in the
// same graph): what the host's NaN guard decides for an uncaptured step. UpdateCoefficients are
// the values the CUDA kernels compute with; sgd_update_cuda and adam_update_cuda compute them with
// the same functions, so a captured and an uncaptured update give identical bits.
struct UpdateCoefficients {
  int mode = 0;  // 0 sgd, 1 sgd with momentum, 2 nesterov, 3 adam (coupled or decoupled decay)
  float lr = 0, momentum = 0, weight_decay = 0;  // sgd modes
  float b1 = 0, b2 = 0, eps = 0, step_size = 0, inv_sqrt_bc2 = 0, shrink = 1, coupled_wd = 0;
};
UpdateCoefficients sgd_coefficients(const SgdOptions& o);
UpdateCoefficients adam_coefficients(const AdamOptions& o);  // std::invalid_argument: step < 1
// One update of param[0, n) with the coefficients at `c` (device memory) unless a gate is not
// finite. a: momentum's velocity or Adam's m (null for plain sgd); b: Adam's v.
void gated_update_cuda(const UpdateCoefficients* c, const double* gate, int gates, float* param,
                       const float* grad, float* a, float* b, size_t n, cudaStream_t stream,
                       uint16_t* param16 = nullptr);

}  // namespace lockstep::kernels
