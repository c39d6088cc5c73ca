// Device selection (DESIGN.md decision 1): one process per device. A rank with device cuda takes
// the GPU of its slot among the ranks of its host that see the same GPUs (launch_env.h: gpu_slot;
// without per-rank CUDA_VISIBLE_DEVICES, its local rank). More such ranks than GPUs is an error
// naming the host and both counts, unless the communicator is MPI, where ranks may share a GPU
// (round robin).
#pragma once

#include <string>

#include "runtime/bootstrap.h"
#include "runtime/context.h"

namespace lockstep {

// Number of CUDA devices this process sees; 0 with `reason` set (the CUDA runtime's words, or
// "not built with CUDA") when none can be used.
int cuda_device_count(std::string* reason);

struct DeviceChoice {
  DeviceKind kind = DeviceKind::cpu;
  int index = -1;
};

// want: "cpu" | "cuda" | "auto" (cuda when a GPU answers, else cpu). share_allowed: ranks may
// share a GPU (MPI communicator). Throws UsageError with an actionable message.
DeviceChoice choose_device(const std::string& want, const World& world, bool share_allowed);

// The rule choose_device applies once the CUDA runtime has answered (gpu_count, and its reason
// when 0). Pure: tests give it any host, rank layout and GPU count.
DeviceChoice choose_device_given(const std::string& want, const World& world, bool share_allowed,
                                 int gpu_count, const std::string& reason);

// Makes `choice` the current device of this process (cudaSetDevice), and lets its default memory
// pool keep up to 256 MiB of freed stream-ordered memory mapped across synchronisations instead of
// none; no-op on cpu.
void activate_device(const DeviceChoice& choice);

// CUDA's current device is per thread: a helper thread (the MPI progress thread staging device
// buffers) calls this before touching device memory, so it works on the GPU activate_device() chose
// rather than silently opening a context on GPU 0. No-op before any activate_device() and in a
// build without CUDA.
void use_active_device();

}  // namespace lockstep
