#include "runtime/step.h"

#include "runtime/device_step.h"
#include "runtime/host_step.h"

namespace lockstep {

std::unique_ptr<Step> make_step(DeviceKind device, const StepShape& shape) {
  if (device == DeviceKind::cuda) return std::make_unique<DeviceStep>(shape);
  return std::make_unique<HostStep>(shape);
}

}  // namespace lockstep
