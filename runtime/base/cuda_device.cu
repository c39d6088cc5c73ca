// CUDA twin of cuda_device_stub.cpp: how many GPUs this process sees, and making one current (with
// its memory pool set up for stream-ordered scratch).
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/info.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/cuda_device.h"

namespace lockstep {

namespace {
// The ordinal activate_device() chose; -1 before. Read by helper threads (use_active_device).
std::atomic<int> g_active_device{-1};

// Stream-ordered allocations (cudaMallocAsync: the NCCL backend's scratch) come from the device's
// default memory pool, whose release threshold is 0: at every synchronisation it unmaps all the
// memory freed into it, and the next allocation maps it again. Keeping up to this much mapped
// makes reuse cheap; more than that (a one-off large scratch) is still given back.
constexpr uint64_t kPoolKeepBytes = uint64_t{256} << 20;
}  // namespace

// kernels/ asks the runtime (checking cudaGetDeviceCount's return code, not only the count it
// leaves untouched on failure); one answer for tests, benchmarks and device choice. Where no
// device is visible, the reason names the CUDA_VISIBLE_DEVICES that hid them.
int cuda_device_count(std::string* reason) {
  const int count = kernels::cuda_device_count_or_reason(reason);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (count == 0 && reason != nullptr && visible != nullptr &&
      reason->rfind("no CUDA device", 0) == 0)
    *reason += std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")";
  return count;
}

std::string cuda_device_uuid(int index) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  const auto* b = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

void activate_device(const DeviceChoice& choice) {
  if (choice.kind != DeviceKind::cuda) return;
  LS_CHECK_CUDA(cudaSetDevice(choice.index));
  cudaMemPool_t pool = nullptr;
  LS_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, choice.index));
  uint64_t keep = 0;
  LS_CHECK_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  if (keep < kPoolKeepBytes) {
    keep = kPoolKeepBytes;
    LS_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  g_active_device.store(choice.index);
}

bool cuda_built() { return true; }

void use_active_device() {
  int want = g_active_device.load();
  if (want < 0) return;
  int current = -1;
  LS_CHECK_CUDA(cudaGetDevice(&current));
  if (current != want) LS_CHECK_CUDA(cudaSetDevice(want));
}

}  // namespace lockstep
