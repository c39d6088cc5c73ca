// Device selection (DESIGN.md decision 1): one process per device. A rank with device cuda takes
// the GPU of its slot among the ranks of its host that see the same GPUs (launch_env.h: gpu_slot;
// without per-rank CUDA_VISIBLE_DEVICES, its local rank). More such ranks than GPUs is an error
// naming the host and both counts, unless the communicator is MPI, where ranks may share a GPU
// (round robin).
// Called from the main thread at start-up. No collective calls: each rank decides alone, from
// the world's facts that every rank shares.
#pragma once

#include <string>

#include "runtime/base/cuda_device.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"

namespace lockstep {

// want: "cpu" | "cuda" | "auto" (cuda when a GPU answers, else cpu). share_allowed: ranks may
// share a GPU (MPI communicator). Throws UsageError with an actionable message.
DeviceChoice choose_device(const std::string& want, const World& world, bool share_allowed);

// The rule choose_device applies once the CUDA runtime has answered (gpu_count, and its reason
// when 0). Pure: tests give it any host, rank layout and GPU count.
DeviceChoice choose_device_given(const std::string& want, const World& world, bool share_allowed,
                                 int gpu_count, const std::string& reason);

}  // namespace lockstep
