#include "runtime/train/host_step.h"

#include <cstdint>
#include <cstring>

#include "kernels/loss.h"
#include "kernels/optimizer.h"

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

ModelPlacement HostStep::placement(Precision precision) {
  ModelPlacement place;
  place.precision = precision;
  return place;
}

void HostStep::loss(const Batch& b, const float* out, float scale, float* dout) {
  const int rows = static_cast<int>(b.rows);
  const LossTotals r =
      shape_.classification
          ? kernels::softmax_cross_entropy_cpu(out, b.labels.data(), b.mask.data(), rows,
                                               shape_.outputs, scale, dout)
          : kernels::mse_cpu(out, b.targets.data(), b.mask.data(), rows, shape_.outputs, scale,
                             dout);
  totals_.loss_sum += r.loss_sum;
  totals_.correct += r.correct;
  totals_.samples += static_cast<double>(b.valid);
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

}  // namespace lockstep
