// Stands in for cuda_device.cu when CUDA is not built.
#include "runtime/base/cuda_device.h"

namespace lockstep {

int cuda_device_count(std::string* reason) {
  if (reason != nullptr) *reason = "this binary was built without CUDA (LOCKSTEP_CUDA=OFF)";
  return 0;
}

std::string cuda_device_uuid(int) { return ""; }
void activate_device(const DeviceChoice&) {}
void use_active_device() {}
bool cuda_built() { return false; }

}  // namespace lockstep
