#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/step/optimizer.h"

// Fused elementwise updates (one read and one write of each buffer per step) and a two-pass norm
// whose partial sums depend only on n, never on scheduling: every rank computes the same norm bits
// from the same all-reduced gradient, so clipping cannot make replicas drift. The coefficients are
// computed on the host by optimizer.cpp's sgd_coefficients and adam_coefficients.

namespace lockstep::kernels {

namespace {

// One element's update with coefficients c: the body of the by-value and the gated kernels alike.
__device__ __forceinline__ void update_element(const UpdateCoefficients& c, float* __restrict__ p,
                                               const float* __restrict__ g, float* __restrict__ a,
                                               float* __restrict__ b, size_t i) {
  if (c.mode == 3) {  // adam: a = m, b = v
    const float pi = p[i];
    const float gi = g[i] + c.coupled_wd * pi;
    const float mi = c.b1 * a[i] + (1.0f - c.b1) * gi;
    const float vi = c.b2 * b[i] + (1.0f - c.b2) * gi * gi;
    a[i] = mi;
    b[i] = vi;
    p[i] = pi * c.shrink - c.step_size * mi / (sqrtf(vi) * c.inv_sqrt_bc2 + c.eps);
    return;
  }
  const float gi = g[i] + c.weight_decay * p[i];
  if (c.mode == 0) {
    p[i] -= c.lr * gi;
    return;
  }
  const float vi = c.momentum * a[i] + gi;  // a = velocity
  a[i] = vi;
  p[i] -= c.lr * (c.mode == 2 ? gi + c.momentum * vi : vi);
}

// p16, where not null: the updated value's bf16 word, as cast_f32_to_bf16_cuda writes it.
__global__ void update_kernel(UpdateCoefficients c, float* __restrict__ p,
                              const float* __restrict__ g, float* __restrict__ a,
                              float* __restrict__ b, uint16_t* __restrict__ p16, size_t n) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    update_element(c, p, g, a, b, i);
    if (p16 != nullptr) p16[i] = cuda::to_bf16(p[i]);
  }
}

__global__ void gated_update_kernel(const UpdateCoefficients* __restrict__ coefficients,
                                    const double* __restrict__ gate, int gates,
                                    float* __restrict__ p, const float* __restrict__ g,
                                    float* __restrict__ a, float* __restrict__ b,
                                    uint16_t* __restrict__ p16, size_t n) {
  for (int k = 0; k < gates; ++k)
    if (!isfinite(gate[k])) return;
  const UpdateCoefficients c = *coefficients;
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    update_element(c, p, g, a, b, i);
    if (p16 != nullptr) p16[i] = cuda::to_bf16(p[i]);
  }
}

constexpr size_t kMaxNormBlocks = 1024;

unsigned norm_blocks(size_t n) {
  // About 8 elements per thread, at most kMaxNormBlocks partials: a function of n alone.
  const size_t per_block = size_t(cuda::kThreads) * 8;
  return static_cast<unsigned>(
      std::clamp<size_t>((n + per_block - 1) / per_block, 1, kMaxNormBlocks));
}

__global__ void square_partials_kernel(const float* __restrict__ g, size_t n,
                                       double* __restrict__ partial) {
  double acc = 0.0;
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) {
    const double x = g[i];
    acc += x * x;
  }
  acc = cuda::block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void norm_finish_kernel(const double* __restrict__ partial, int blocks, double* norm) {
  double acc = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) acc += partial[b];
  acc = cuda::block_sum(acc);
  if (threadIdx.x == 0) *norm = sqrt(acc);
}

__global__ void scale_kernel(float* __restrict__ x, size_t n, float s) {
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) x[i] *= s;
}

// Reads the norm on the device: no host round trip between the norm and the clip.
__global__ void clip_kernel(float* __restrict__ g, size_t n, const double* __restrict__ norm,
                            double max_norm) {
  const double current = *norm;
  if (!(max_norm > 0 && current > max_norm)) return;
  const float s = static_cast<float>(max_norm / current);
  for (size_t i = cuda::thread_index(); i < n; i += cuda::thread_stride()) g[i] *= s;
}

// One thread: the host loop's order and roundings (products and sums rounded apart).
__global__ void sum_of_squares_kernel(const double* __restrict__ norms, int count,
                                      double* squares) {
  double acc = 0.0;
  for (int i = 0; i < count; ++i) acc = __dadd_rn(acc, __dmul_rn(norms[i], norms[i]));
  *squares = acc;
}

__global__ void sqrt_kernel(double* x) { *x = sqrt(*x); }

double read_norm(const double* device, cudaStream_t stream) {
  double host = 0;
  LS_CHECK_CUDA(cudaMemcpyAsync(&host, device, sizeof host, cudaMemcpyDeviceToHost, stream));
  LS_CHECK_CUDA(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace

void sgd_update_cuda(const SgdOptions& o, float* param, const float* grad, float* velocity,
                     size_t n, cudaStream_t stream, uint16_t* param16) {
  const UpdateCoefficients c = sgd_coefficients(o);
  if (c.mode != 0 && velocity == nullptr)
    throw std::invalid_argument("sgd_update_cuda: momentum needs a velocity");
  if (n == 0) return;
  update_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(c, param, grad, velocity, nullptr,
                                                                  param16, n);
  LS_CHECK_LAUNCH("update_kernel (sgd)");
}

void adam_update_cuda(const AdamOptions& o, float* param, const float* grad, float* m, float* v,
                      size_t n, cudaStream_t stream, uint16_t* param16) {
  if (o.step < 1) throw std::invalid_argument("adam_update_cuda: step is 1-based");
  if (n == 0) return;
  update_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(adam_coefficients(o), param, grad,
                                                                  m, v, param16, n);
  LS_CHECK_LAUNCH("update_kernel (adam)");
}

void gated_update_cuda(const UpdateCoefficients* c, const double* gate, int gates, float* param,
                       const float* grad, float* a, float* b, size_t n, cudaStream_t stream,
                       uint16_t* param16) {
  if (n == 0) return;
  gated_update_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(c, gate, gates, param, grad,
                                                                        a, b, param16, n);
  LS_CHECK_LAUNCH("gated_update_kernel");
}

void global_norm_device_cuda(const float* g, size_t n, double* norm, cudaStream_t stream) {
  const unsigned blocks = norm_blocks(n);
  cuda::StreamScratch partial(blocks * sizeof(double), stream);
  square_partials_kernel<<<blocks, cuda::kThreads, 0, stream>>>(g, n, partial.as<double>());
  LS_CHECK_LAUNCH("square_partials_kernel");
  norm_finish_kernel<<<1, cuda::kThreads, 0, stream>>>(partial.as<double>(),
                                                       static_cast<int>(blocks), norm);
  LS_CHECK_LAUNCH("norm_finish_kernel");
}

double global_norm_cuda(const float* g, size_t n, cudaStream_t stream) {
  cuda::StreamScratch norm(sizeof(double), stream);
  global_norm_device_cuda(g, n, norm.as<double>(), stream);
  return read_norm(norm.as<double>(), stream);
}

void scale_cuda(float* x, size_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(x, n, s);
  LS_CHECK_LAUNCH("scale_kernel");
}

void clip_by_device_norm_cuda(float* g, size_t n, const double* norm, double max_norm,
                              cudaStream_t stream) {
  if (n == 0 || !(max_norm > 0)) return;
  clip_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(g, n, norm, max_norm);
  LS_CHECK_LAUNCH("clip_kernel");
}

void sum_of_squares_device_cuda(const double* norms, int count, double* squares,
                                cudaStream_t stream) {
  sum_of_squares_kernel<<<1, 1, 0, stream>>>(norms, count, squares);
  LS_CHECK_LAUNCH("sum_of_squares_kernel");
}

void sqrt_device_cuda(double* x, cudaStream_t stream) {
  sqrt_kernel<<<1, 1, 0, stream>>>(x);
  LS_CHECK_LAUNCH("sqrt_kernel");
}

double clip_by_global_norm_cuda(float* g, size_t n, double max_norm, cudaStream_t stream) {
  cuda::StreamScratch norm(sizeof(double), stream);
  global_norm_device_cuda(g, n, norm.as<double>(), stream);
  clip_by_device_norm_cuda(g, n, norm.as<double>(), max_norm, stream);
  return read_norm(norm.as<double>(), stream);
}

}  // namespace lockstep::kernels
