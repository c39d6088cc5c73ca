#include <cuda_runtime_api.h>

#include "kernels/cuda/info.h"

namespace lockstep::kernels {

int cuda_device_count_or_reason(std::string* reason) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    // The count is not written on failure; clear the error so later calls start clean.
    (void)cudaGetLastError();
    if (reason != nullptr)
      *reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(rc) + ": " +
                cudaGetErrorString(rc);
    return 0;
  }
  if (count <= 0) {
    if (reason != nullptr) *reason = "no CUDA device is visible";
    return 0;
  }
  return count;
}

}  // namespace lockstep::kernels
