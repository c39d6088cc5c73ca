// HostStep: the Step (step.h) of a model whose layers compute on the CPU. Inputs are read where
// the loader left them, the loss is the kernels' CPU form, totals add up on the host per
// micro-batch (so the guard's flags can travel with the gradient reduction), and finite-ness and
// clipping scan the reduced gradient in host memory.
// Used by the training thread only.
// No collective calls: the Trainer runs the gradient reduction between loss() and finish().
#pragma once

#include <vector>

#include "runtime/train/step.h"

namespace lockstep {

// True when none of x[0, n) is NaN or Inf.
bool all_finite(const float* x, size_t n);

class HostStep final : public Step {
 public:
  explicit HostStep(const StepShape& shape);

  ModelPlacement placement(Precision precision) override;
  DeviceTimer* timer() override { return nullptr; }
  GpuTrace* trace() override { return nullptr; }
  const float* upload(const Batch& b) override { return b.x.data(); }
  void loss(const Batch& b, const float* out, float scale, float* dout) override;
  void release() override {}
  const LossTotals* totals_before_reduce() const override { return &totals_; }
  Outcome finish(const float* grads, size_t n) override;
  void clip(float* grads, size_t n, double max_norm) override;
  void poison_loss() override;

 private:
  StepShape shape_;
  LossTotals totals_;
  std::vector<float> weights_;  // positions > 1: max_rows * positions, each row's mask repeated
};

}  // namespace lockstep
