// Helpers for tests on CUDA device buffers, free of CUDA headers so that they compile in every
// build: the reason to skip (empty when a GPU answers), and BufferOps over device memory for the
// collective cases of collective_cases.h. Device memory lives on the GPU activate_device() chose.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "collective_cases.h"
#include "kernels/cuda/memory.h"
#include "runtime/process/device.h"

namespace lockstep::testing_util {

// Empty when a CUDA device answers; otherwise why not, in the CUDA runtime's words (or "built
// without CUDA"), for GTEST_SKIP().
inline std::string gpu_skip_reason() {
  std::string reason;
  if (cuda_device_count(&reason) > 0) return "";
  return "no usable CUDA device: " + reason;
}

// A test on GPU 0, skipped with the reason where no GPU answers. Every rank gets the same answer,
// so under MPI all ranks skip together or none does.
class OnGpu0 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    activate_device({DeviceKind::cuda, 0});
  }
};

inline BufferOps device_buffer_ops() {
  BufferOps ops;
  // One byte at least: an empty buffer still gets a pointer of its own, as a host vector does.
  ops.alloc = [](size_t bytes) { return kernels::cuda_alloc(bytes > 0 ? bytes : 1); };
  ops.release = [](void* p) { kernels::cuda_free(p); };
  ops.upload = [](void* dst, const void* src, size_t n) {
    kernels::cuda_copy_to_device(dst, src, n);
  };
  ops.download = [](void* dst, const void* src, size_t n) {
    kernels::cuda_copy_to_host(dst, src, n);
  };
  return ops;
}

}  // namespace lockstep::testing_util
