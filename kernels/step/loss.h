// Losses over a batch with per-sample weights (1 for a real sample, 0 for padding of a partial
// batch; null means all 1). Each returns the weighted SUM of per-sample losses and writes the
// gradient of (scale * that sum) into dlogits/dpred, so a caller that passes scale = 1/(valid
// samples in the global batch) gets the gradient of the global mean loss after an all-reduce sum.
// Stateless functions: threads may call them on separate buffers. No collective calls.
#pragma once

#include <cstdint>

#include "kernels/cuda/stream.h"
#include "kernels/step/loss_totals.h"

namespace lockstep::kernels {

// The CPU forms return loss_sum and correct (LossTotals, loss_totals.h); samples and
// invalid_labels stay 0.
// Softmax cross-entropy on integer labels in [0, classes), fused and numerically stable
// (log-sum-exp with the row max subtracted; the exponentials by gelu_math.h's polynomial, within
// 2 ulp of expf, in vectors, and summed in double in an order that gives the AVX2 and AVX-512
// builds the same bits). dlogits = scale * w * (softmax - onehot); null skips. A sample counts as
// correct when its label is the first column holding the row's largest logit.
// A label outside [0, classes) throws std::out_of_range.
LossTotals softmax_cross_entropy_cpu(const float* logits, const int32_t* labels,
                                     const float* weights, int batch, int classes, float scale,
                                     float* dlogits);

// Mean squared error: per-sample loss = mean_j (pred - target)^2 over dim outputs.
// dpred = scale * w * 2 (pred - target) / dim; null skips.
LossTotals mse_cpu(const float* pred, const float* target, const float* weights, int batch, int dim,
                   float scale, float* dpred);

// CUDA twins (loss.cu): device pointers, enqueued on `stream`. The *_sums_cuda forms add the
// batch's loss_sum, correct and invalid_labels into a LossTotals in device memory (samples is
// left alone) and do not wait, so a trainer reads them back once per step instead of syncing
// every micro-batch (zero the LossTotals to start a new total). A label outside [0, classes)
// cannot throw from the GPU: its row gets a zero gradient and no loss, and counts in
// invalid_labels. The forms that return LossTotals wait for the stream and then throw
// std::out_of_range. Totals are reduced in a fixed order: identical inputs give identical bits.
void softmax_cross_entropy_sums_cuda(const float* logits, const int32_t* labels,
                                     const float* weights, int batch, int classes, float scale,
                                     float* dlogits, LossTotals* sums, cudaStream_t stream);
// The same on bf16 logits (raw 16-bit words, cast.h), a bf16 run's tied head: each logit widened
// exactly, then the fp32 form's arithmetic, so the totals are those of
// softmax_cross_entropy_sums_cuda on the widened logits and each dlogits word the bf16 rounding of
// its gradient (round to nearest even). dlogits may not overlap logits.
void softmax_cross_entropy_bf16_sums_cuda(const uint16_t* logits, const int32_t* labels,
                                          const float* weights, int batch, int classes, float scale,
                                          uint16_t* dlogits, LossTotals* sums, cudaStream_t stream);
LossTotals softmax_cross_entropy_cuda(const float* logits, const int32_t* labels,
                                      const float* weights, int batch, int classes, float scale,
                                      float* dlogits, cudaStream_t stream);
void mse_sums_cuda(const float* pred, const float* target, const float* weights, int batch, int dim,
                   float scale, float* dpred, LossTotals* sums, cudaStream_t stream);
LossTotals mse_cuda(const float* pred, const float* target, const float* weights, int batch,
                    int dim, float scale, float* dpred, cudaStream_t stream);

}  // namespace lockstep::kernels
