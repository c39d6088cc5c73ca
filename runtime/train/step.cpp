#include "runtime/train/step.h"

#include "runtime/train/device_step.h"
#include "runtime/train/host_step.h"

namespace lockstep {

std::unique_ptr<Step> make_step(DeviceKind device, const StepShape& shape) {
  if (device == DeviceKind::cuda) return std::make_unique<DeviceStep>(shape);
  return std::make_unique<HostStep>(shape);
}

}  // namespace lockstep
