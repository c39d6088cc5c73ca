#include "runtime/train/host_step.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/step/loss.h"
#include "kernels/step/optimizer.h"
#include "kernels/step/thread_lanes.h"
#include "runtime/base/error.h"

namespace lockstep {

// NaN and Inf are the floats whose exponent bits are all ones. An OR over integer tests
// vectorises, unlike a float reduction.
bool all_finite(const float* x, size_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

HostStep::HostStep(const StepShape& shape) : shape_(shape) {
  if (shape_.positions > 1)
    weights_.resize(static_cast<size_t>(shape_.max_rows) * static_cast<size_t>(shape_.positions));
}

ModelPlacement HostStep::placement(Precision precision) {
  ModelPlacement place;
  place.precision = precision;
  // A lane per thread of the rank (model.h), unless LOCKSTEP_CPU_LANES=off.
  if (place.knobs.cpu_lanes) place.lanes = kernels::lane_threads();
  return place;
}

void HostStep::loss(const Batch& b, const float* out, float scale, float* dout) {
  const auto positions = static_cast<size_t>(shape_.positions);
  const int rows = static_cast<int>(b.rows) * shape_.positions;
  const float* weights = b.mask.data();
  if (positions > 1) {
    if (shape_.classification && b.labels.size() != static_cast<size_t>(rows))
      throw Error("HostStep::loss: a batch of " + std::to_string(b.rows) + " rows with " +
                  std::to_string(b.labels.size()) + " labels, expected " + std::to_string(rows) +
                  " (" + std::to_string(positions) + " per row)");
    weights_per_position(b, positions, weights_.data(), weights_.size(), "HostStep::loss");
    weights = weights_.data();
  }
  const LossTotals r =
      shape_.classification
          ? kernels::softmax_cross_entropy_cpu(out, b.labels.data(), weights, rows, shape_.outputs,
                                               scale, dout)
          : kernels::mse_cpu(out, b.targets.data(), weights, rows, shape_.outputs, scale, dout);
  totals_.loss_sum += r.loss_sum;
  totals_.correct += r.correct;
  totals_.samples += static_cast<double>(b.valid) * static_cast<double>(positions);
}

Step::Outcome HostStep::finish(const float* grads, size_t n) {
  Outcome o;
  o.totals = totals_;
  o.grads_finite = grads == nullptr || all_finite(grads, n);
  totals_ = LossTotals{};
  return o;
}

void HostStep::clip(float* grads, size_t n, double max_norm) {
  kernels::clip_by_global_norm_cpu(grads, n, max_norm);
}

void HostStep::poison_loss() { totals_.loss_sum += std::numeric_limits<double>::infinity(); }

}  // namespace lockstep
