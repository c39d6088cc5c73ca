#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/step/loss.h"

// One block per row: the block's threads stride over the row's classes (or outputs) and combine
// with warp shuffles, then write the row's weighted loss, correct count and invalid-label flag to a
// scratch row. A second, single-block kernel adds the rows in a fixed order into the caller's
// LossTotals. Arithmetic follows loss.cpp step by step (float exponentials, double sums, the same
// operation order for the gradient), so the twins agree to float rounding.

namespace lockstep::kernels {

namespace {

constexpr int kStats = 3;  // per row: weight * loss, weight if correct, 1 if the label is invalid

void check_sizes(int batch, int width, const char* who) {
  if (batch < 0 || width <= 0)
    throw std::invalid_argument(std::string(who) + ": batch must be >= 0 and classes/dim > 0");
}

struct Best {
  float value;
  int index;
};

// The larger value wins; equal values go to the lower index, as loss.cpp's first strict maximum.
__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// `better` is associative and commutative, so every thread ends with the same winner.
__device__ Best block_best(Best v) {
  __shared__ Best partial[cuda::kWarp];
  const int lane = threadIdx.x % cuda::kWarp, warp = threadIdx.x / cuda::kWarp;
  for (int offset = cuda::kWarp / 2; offset > 0; offset /= 2)
    v = better(v, {__shfl_xor_sync(0xffffffffu, v.value, offset),
                   __shfl_xor_sync(0xffffffffu, v.index, offset)});
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  Best total = partial[0];
  const int warps = blockDim.x / cuda::kWarp;
  for (int w = 1; w < warps; ++w) total = better(total, partial[w]);
  __syncthreads();
  return total;
}

// Logits and their gradient in fp32, or in bf16 words: a bf16 row is widened (exactly, bf16.cuh)
// as it is read and its gradient rounded as it is written, the arithmetic in between the fp32
// kernel's.
using cuda::widen;
__device__ __forceinline__ void put(float* d, int j, float g) { d[j] = g; }
__device__ __forceinline__ void put(uint16_t* d, int j, float g) { d[j] = cuda::to_bf16(g); }

template <class T>
__global__ void xent_rows_kernel(const T* __restrict__ logits, const int32_t* __restrict__ labels,
                                 const float* __restrict__ weights, int classes, float scale,
                                 T* __restrict__ dlogits, double* __restrict__ stats) {
  const size_t row = blockIdx.x;
  const T* l = logits + row * classes;
  T* d = dlogits != nullptr ? dlogits + row * classes : nullptr;
  double* out = stats + row * kStats;
  const int label = labels[row];
  const float wt = weights != nullptr ? weights[row] : 1.0f;
  const bool invalid = label < 0 || label >= classes;
  // A zero-weight row (padding) may hold anything, even non-finite logits: skipped, not multiplied
  // by 0. The whole block takes this branch together, before any barrier.
  if (invalid || wt == 0.0f) {
    if (d != nullptr)
      for (int j = threadIdx.x; j < classes; j += blockDim.x) put(d, j, 0.0f);
    if (threadIdx.x == 0) {
      out[0] = 0.0;
      out[1] = 0.0;
      out[2] = invalid ? 1.0 : 0.0;
    }
    return;
  }
  Best mine{-INFINITY, INT_MAX};
  for (int j = threadIdx.x; j < classes; j += blockDim.x) mine = better(mine, {widen(l[j]), j});
  const Best best = block_best(mine);
  const float top = best.value;
  double part = 0.0;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) part += expf(widen(l[j]) - top);
  const double sum = cuda::block_sum(part);
  if (d != nullptr) {
    const float c = static_cast<float>(static_cast<double>(scale * wt) / sum);
    // Rounded step by step as loss.cpp's loop (no contraction into a fused multiply-add), so that
    // both instantiations, fp32 and bf16, give the same gradient before it is stored.
    const float hit = __fmul_rn(scale, wt);
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
      float g = __fmul_rn(expf(widen(l[j]) - top), c);
      if (j == label) g = __fsub_rn(g, hit);
      put(d, j, g);
    }
  }
  if (threadIdx.x == 0) {
    const double loss = log(sum) - (static_cast<double>(widen(l[label])) - top);
    out[0] = wt * loss;
    out[1] = best.index == label ? wt : 0.0;
    out[2] = 0.0;
  }
}

__global__ void mse_rows_kernel(const float* __restrict__ pred, const float* __restrict__ target,
                                const float* __restrict__ weights, int dim, float scale,
                                float* __restrict__ dpred, double* __restrict__ stats) {
  const size_t off = size_t(blockIdx.x) * dim;
  double* out = stats + size_t(blockIdx.x) * kStats;
  const float wt = weights != nullptr ? weights[blockIdx.x] : 1.0f;
  if (wt == 0.0f) {
    if (dpred != nullptr)
      for (int j = threadIdx.x; j < dim; j += blockDim.x) dpred[off + j] = 0.0f;
    if (threadIdx.x == 0) out[0] = out[1] = out[2] = 0.0;
    return;
  }
  double part = 0.0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    const double e = static_cast<double>(pred[off + j]) - target[off + j];
    part += e * e;
  }
  const double sq = cuda::block_sum(part);
  if (dpred != nullptr) {
    const float c = 2.0f * scale * wt / static_cast<float>(dim);
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
      dpred[off + j] = c * (pred[off + j] - target[off + j]);
  }
  if (threadIdx.x == 0) {
    out[0] = wt * sq / dim;
    out[1] = out[2] = 0.0;
  }
}

// One block: thread t sums rows t, t + blockDim, ... and the block adds the threads' sums in a
// fixed tree order, so the totals have the same bits every run.
__global__ void add_row_stats_kernel(const double* __restrict__ stats, int rows, LossTotals* sums) {
  double acc[kStats] = {0.0, 0.0, 0.0};
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    for (int k = 0; k < kStats; ++k) acc[k] += stats[size_t(r) * kStats + k];
  const double loss = cuda::block_sum(acc[0]);
  const double correct = cuda::block_sum(acc[1]);
  const double invalid = cuda::block_sum(acc[2]);
  if (threadIdx.x == 0) {
    sums->loss_sum += loss;
    sums->correct += correct;
    sums->invalid_labels += invalid;
  }
}

void add_row_stats(const double* stats, int rows, LossTotals* sums, cudaStream_t stream) {
  add_row_stats_kernel<<<1, cuda::kThreads, 0, stream>>>(stats, rows, sums);
  LS_CHECK_LAUNCH("add_row_stats_kernel");
}

// Runs a *_sums_cuda form into a fresh device LossTotals and brings it back (waits for the
// stream).
template <class Enqueue>
LossTotals sums_on_host(cudaStream_t stream, Enqueue enqueue) {
  cuda::StreamScratch device(sizeof(LossTotals), stream);
  LS_CHECK_CUDA(cudaMemsetAsync(device.as<LossTotals>(), 0, sizeof(LossTotals), stream));
  enqueue(device.as<LossTotals>());
  LossTotals host;
  LS_CHECK_CUDA(
      cudaMemcpyAsync(&host, device.as<LossTotals>(), sizeof host, cudaMemcpyDeviceToHost, stream));
  LS_CHECK_CUDA(cudaStreamSynchronize(stream));
  return host;
}

template <class T>
void xent_sums(const T* logits, const int32_t* labels, const float* weights, int batch, int classes,
               float scale, T* dlogits, LossTotals* sums, cudaStream_t stream, const char* who) {
  check_sizes(batch, classes, who);
  if (batch == 0) return;
  cuda::StreamScratch stats(size_t(batch) * kStats * sizeof(double), stream);
  xent_rows_kernel<T><<<batch, cuda::threads_for_row(classes), 0, stream>>>(
      logits, labels, weights, classes, scale, dlogits, stats.as<double>());
  LS_CHECK_LAUNCH("xent_rows_kernel");
  add_row_stats(stats.as<double>(), batch, sums, stream);
}

}  // namespace

void softmax_cross_entropy_sums_cuda(const float* logits, const int32_t* labels,
                                     const float* weights, int batch, int classes, float scale,
                                     float* dlogits, LossTotals* sums, cudaStream_t stream) {
  xent_sums(logits, labels, weights, batch, classes, scale, dlogits, sums, stream,
            "softmax_cross_entropy_sums_cuda");
}

void softmax_cross_entropy_bf16_sums_cuda(const uint16_t* logits, const int32_t* labels,
                                          const float* weights, int batch, int classes, float scale,
                                          uint16_t* dlogits, LossTotals* sums,
                                          cudaStream_t stream) {
  xent_sums(logits, labels, weights, batch, classes, scale, dlogits, sums, stream,
            "softmax_cross_entropy_bf16_sums_cuda");
}

LossTotals softmax_cross_entropy_cuda(const float* logits, const int32_t* labels,
                                      const float* weights, int batch, int classes, float scale,
                                      float* dlogits, cudaStream_t stream) {
  check_sizes(batch, classes, "softmax_cross_entropy_cuda");
  if (batch == 0) return {};
  const LossTotals s = sums_on_host(stream, [&](LossTotals* device) {
    softmax_cross_entropy_sums_cuda(logits, labels, weights, batch, classes, scale, dlogits, device,
                                    stream);
  });
  if (s.invalid_labels > 0)
    throw std::out_of_range(
        "softmax_cross_entropy_cuda: " + std::to_string(static_cast<long long>(s.invalid_labels)) +
        " label(s) outside [0, " + std::to_string(classes) + ")");
  return s;
}

void mse_sums_cuda(const float* pred, const float* target, const float* weights, int batch, int dim,
                   float scale, float* dpred, LossTotals* sums, cudaStream_t stream) {
  check_sizes(batch, dim, "mse_sums_cuda");
  if (batch == 0) return;
  cuda::StreamScratch stats(size_t(batch) * kStats * sizeof(double), stream);
  mse_rows_kernel<<<batch, cuda::threads_for_row(dim), 0, stream>>>(
      pred, target, weights, dim, scale, dpred, stats.as<double>());
  LS_CHECK_LAUNCH("mse_rows_kernel");
  add_row_stats(stats.as<double>(), batch, sums, stream);
}

LossTotals mse_cuda(const float* pred, const float* target, const float* weights, int batch,
                    int dim, float scale, float* dpred, cudaStream_t stream) {
  check_sizes(batch, dim, "mse_cuda");
  if (batch == 0) return {};
  const LossTotals s = sums_on_host(stream, [&](LossTotals* device) {
    mse_sums_cuda(pred, target, weights, batch, dim, scale, dpred, device, stream);
  });
  return s;
}

}  // namespace lockstep::kernels
