// Stands in for info.cu when CUDA is not built: no device, and the reason says why.
#include <string>

#include "kernels/cuda/info.h"

namespace lockstep::kernels {

int cuda_device_count_or_reason(std::string* reason) {
  if (reason != nullptr) *reason = "built without CUDA (LOCKSTEP_CUDA=OFF)";
  return 0;
}

}  // namespace lockstep::kernels
