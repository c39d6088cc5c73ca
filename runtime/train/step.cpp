#include "runtime/train/step.h"

#include <algorithm>
#include <string>

#include "runtime/base/error.h"
#include "runtime/train/device_step.h"
#include "runtime/train/host_step.h"

namespace lockstep {

void weights_per_position(const Batch& b, size_t positions, float* weights, size_t capacity,
                          const char* who) {
  const auto rows = static_cast<size_t>(b.rows);
  if (b.mask.size() != rows || rows * positions > capacity)
    throw Error(std::string(who) + ": a batch of " + std::to_string(rows) + " rows with " +
                std::to_string(b.mask.size()) + " mask values, " + std::to_string(positions) +
                " predictions each (room for " + std::to_string(capacity) + ")");
  for (size_t r = 0; r < rows; ++r) std::fill_n(weights + r * positions, positions, b.mask[r]);
}

std::unique_ptr<Step> make_step(DeviceKind device, const StepShape& shape) {
  if (device == DeviceKind::cuda) return std::make_unique<DeviceStep>(shape);
  return std::make_unique<HostStep>(shape);
}

}  // namespace lockstep
