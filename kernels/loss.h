// Losses over a batch with per-sample weights (1 for a real sample, 0 for padding of a partial
// batch; null means all 1). Each returns the weighted SUM of per-sample losses and writes the
// gradient of (scale * that sum) into dlogits/dpred, so a caller that passes scale = 1/(valid
// samples in the global batch) gets the gradient of the global mean loss after an all-reduce sum.
#pragma once

#include <cstdint>

#include "kernels/cuda_stream.h"

namespace lockstep::kernels {

struct LossResult {
  double loss_sum = 0;  // sum over samples of weight * loss
  double correct = 0;   // sum of weights of correctly classified samples (classification only)
};

// Softmax cross-entropy on integer labels in [0, classes), fused and numerically stable
// (log-sum-exp with the row max subtracted). dlogits = scale * w * (softmax - onehot); null skips.
// A label outside [0, classes) throws std::out_of_range.
LossResult softmax_cross_entropy_cpu(const float* logits, const int32_t* labels,
                                     const float* weights, int batch, int classes, float scale,
                                     float* dlogits);

// Mean squared error: per-sample loss = mean_j (pred - target)^2 over dim outputs.
// dpred = scale * w * 2 (pred - target) / dim; null skips.
LossResult mse_cpu(const float* pred, const float* target, const float* weights, int batch, int dim,
                   float scale, float* dpred);

// CUDA twins (loss.cu): device pointers, enqueued on `stream`. The *_sums_cuda forms add the
// batch's totals into a LossSums in device memory and do not wait, so a trainer reads them back
// once per log interval instead of syncing every step (zero the LossSums to start a new total).
// A label outside [0, classes) cannot throw from the GPU: its row gets a zero gradient and no
// loss, and counts in invalid_labels. The LossResult forms wait for the stream and then throw
// std::out_of_range. Totals are reduced in a fixed order: identical inputs give identical bits.
struct LossSums {
  double loss_sum = 0;
  double correct = 0;
  double invalid_labels = 0;
};
void softmax_cross_entropy_sums_cuda(const float* logits, const int32_t* labels,
                                     const float* weights, int batch, int classes, float scale,
                                     float* dlogits, LossSums* sums, cudaStream_t stream);
LossResult softmax_cross_entropy_cuda(const float* logits, const int32_t* labels,
                                      const float* weights, int batch, int classes, float scale,
                                      float* dlogits, cudaStream_t stream);
void mse_sums_cuda(const float* pred, const float* target, const float* weights, int batch, int dim,
                   float scale, float* dpred, LossSums* sums, cudaStream_t stream);
LossResult mse_cuda(const float* pred, const float* target, const float* weights, int batch,
                    int dim, float scale, float* dpred, cudaStream_t stream);

}  // namespace lockstep::kernels
