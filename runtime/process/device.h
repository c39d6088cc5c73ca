// Device selection (DESIGN.md decision 1): one process per device. A rank with device cuda takes
// the GPU of its slot among the ranks of its host that see the same GPUs (launch_env.h: gpu_slot;
// without per-rank CUDA_VISIBLE_DEVICES, its local rank). Ranks of one host that end up on the same
// GPU (by its UUID) are an error naming the host and both counts, unless the communicator is MPI,
// where ranks may share a GPU (round robin).
// Called from the main thread at start-up. choose_device has no collective calls: each rank
// decides alone; check_gpu_sharing and make_context are collective.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/base/cuda_device.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"

namespace lockstep {

// want: "cpu" | "cuda" | "auto" (cuda when a GPU answers, else cpu). gpu_count: how many GPUs
// this rank sees, and why none (ContextOptions::gpu_count); empty: the CUDA runtime's count.
// Throws UsageError with an actionable message. Whether ranks then share a GPU is
// check_gpu_sharing's to judge.
DeviceChoice choose_device(const std::string& want, const World& world,
                           const GpuCounter& gpu_count = {});

// Which GPU a rank took: its host and the GPU's UUID (cuda_device_uuid).
struct GpuClaim {
  std::string host;
  std::string gpu;
};

// The rule once every rank has chosen (make_context, lockstep-bench collectives): ranks of one host
// that took the same GPU share it, which NCCL refuses and only the MPI communicator allows
// (share_allowed). Judged by UUID, not by CUDA_VISIBLE_DEVICES: under Slurm's per-task device
// cgroups every task sees its own GPU as "0", while two spellings of one GPU ("0" and "GPU-...")
// are one. Pure: claims of every rank, in rank order. Returns "" or the problem, naming the first
// such host, its ranks and GPUs.
std::string gpu_sharing_problem(const std::vector<GpuClaim>& claims, bool share_allowed);

// Collective over `host`: every rank's claim for `choice` (its GPU's UUID from `uuid`, else
// cuda_device_uuid) is gathered, and gpu_sharing_problem agreed (AgreedUsageError on every rank).
// No-op, on every rank alike, when choice is not a GPU.
void check_gpu_sharing(Communicator& host, const World& world, const DeviceChoice& choice,
                       bool share_allowed, const std::function<std::string(int)>& uuid = {});

// Test switch, read once from the environment: LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 lets ranks
// share a GPU over NCCL too. NCCL refuses two ranks on one GPU of one host; ranks given
// different NCCL_HOSTID values count as separate hosts to it and talk over its network transport,
// which is how the multi-rank NCCL tests run on a machine with one GPU. Never for real runs.
constexpr const char* kTestOnlyNcclSharesGpuEnv = "LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU";
bool test_only_nccl_shares_gpu();

// The rule choose_device applies once the CUDA runtime has answered (gpu_count, and its reason
// when 0): the GPU of the rank's slot among the ranks that see the same GPUs (round robin where
// there are more such ranks than GPUs). Pure: tests give it any host, rank layout and GPU count.
DeviceChoice choose_device_given(const std::string& want, const World& world, int gpu_count,
                                 const std::string& reason);

}  // namespace lockstep
