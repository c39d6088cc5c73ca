// Device selection (DESIGN.md decision 1): one process per device. A rank with device cuda takes
// the GPU of its slot among the ranks of its host that see the same GPUs (launch_env.h: gpu_slot;
// without per-rank CUDA_VISIBLE_DEVICES, its local rank). More such ranks than GPUs is an error
// naming the host and both counts, unless the communicator is MPI, where ranks may share a GPU
// (round robin).
// Called from the main thread at start-up. No collective calls: each rank decides alone, from
// the world's facts that every rank shares.
#pragma once

#include <functional>
#include <string>

#include "runtime/base/cuda_device.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"

namespace lockstep {

// want: "cpu" | "cuda" | "auto" (cuda when a GPU answers, else cpu). share_allowed: ranks may
// share a GPU (MPI communicator). gpu_count: how many GPUs this rank sees, and why none
// (ContextOptions::gpu_count); empty: the CUDA runtime's count. Throws UsageError with an
// actionable message.
DeviceChoice choose_device(const std::string& want, const World& world, bool share_allowed,
                           const GpuCounter& gpu_count = {});

// Test switch, read once from the environment: LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 lets ranks
// share a GPU over NCCL too. NCCL refuses two ranks on one GPU of one host; ranks given
// different NCCL_HOSTID values count as separate hosts to it and talk over its network transport,
// which is how the multi-rank NCCL tests run on a machine with one GPU. Never for real runs.
constexpr const char* kTestOnlyNcclSharesGpuEnv = "LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU";
bool test_only_nccl_shares_gpu();

// The rule choose_device applies once the CUDA runtime has answered (gpu_count, and its reason
// when 0). Pure: tests give it any host, rank layout and GPU count.
DeviceChoice choose_device_given(const std::string& want, const World& world, bool share_allowed,
                                 int gpu_count, const std::string& reason);

}  // namespace lockstep
