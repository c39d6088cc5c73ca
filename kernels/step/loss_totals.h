// LossTotals: the running totals of a loss over samples, one plain struct for every place that
// keeps them: the CPU loss kernels return them, the CUDA loss kernels add into one in device
// memory (its layout is the device layout: four doubles, in this order), and the training step,
// evaluation, the progress window and the epoch summary add them up. Kept free of other includes
// so that kernels/ and runtime/ can both use it.
// Plain data: one thread uses a value at a time. No collective calls (sum_over_ranks in
// run_reporter.h adds them up over the ranks).
#pragma once

namespace lockstep::kernels {

struct LossTotals {
  double loss_sum = 0;        // sum over samples of weight * loss
  double correct = 0;         // sum of the weights of correctly classified samples (classification)
  double samples = 0;         // the samples counted, by their caller (the loss kernels leave it)
  double invalid_labels = 0;  // CUDA forms: samples whose label was outside [0, classes)

  LossTotals& operator+=(const LossTotals& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    samples += o.samples;
    invalid_labels += o.invalid_labels;
    return *this;
  }
  double mean_loss() const { return samples > 0 ? loss_sum / samples : 0; }
  double accuracy() const { return samples > 0 ? correct / samples : 0; }
};

}  // namespace lockstep::kernels
