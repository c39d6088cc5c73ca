// Whether a CUDA device answers, and if not, why: for GPU tests that must skip with a reason and
// for benchmarks that pick a device. No CUDA header needed. In a build without CUDA the count is 0
// and the reason says so. Thread-safe.
// No collective calls.
#pragma once

#include <string>

namespace lockstep::kernels {

// The number of CUDA devices this process sees. 0 with `reason` set (when non-null) when none can
// be used: the CUDA runtime's error name and words (e.g. cudaErrorInsufficientDriver on a machine
// without a driver), "no CUDA device is visible", or "built without CUDA".
int cuda_device_count_or_reason(std::string* reason);

}  // namespace lockstep::kernels
