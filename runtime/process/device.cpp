#include "runtime/process/device.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/process/launch_env.h"

namespace lockstep {

bool test_only_nccl_shares_gpu() {
  static const bool on = [] {
    const char* v = std::getenv(kTestOnlyNcclSharesGpuEnv);
    const bool set = v != nullptr && std::strcmp(v, "1") == 0;
    if (set)
      LS_LOG(warn) << kTestOnlyNcclSharesGpuEnv << "=1: ranks may share a GPU over NCCL (a test "
                   << "switch: NCCL accepts it only for ranks given different NCCL_HOSTID values, "
                   << "which it then treats as separate hosts)";
    return set;
  }();
  return on;
}

DeviceChoice choose_device(const std::string& want, const World& world, bool share_allowed,
                           const GpuCounter& gpu_count) {
  // --device cpu never wakes the CUDA runtime.
  if (want != "cuda" && want != "auto")
    return choose_device_given(want, world, share_allowed, 0, "");
  std::string reason;
  int count = gpu_count ? gpu_count(&reason) : cuda_device_count(&reason);
  return choose_device_given(want, world, share_allowed || test_only_nccl_shares_gpu(), count,
                             reason);
}

DeviceChoice choose_device_given(const std::string& want, const World& world, bool share_allowed,
                                 int count, const std::string& reason) {
  if (want != "cpu" && want != "cuda" && want != "auto")
    throw UsageError("--device must be cpu, cuda or auto, not '" + want + "'");
  if (want == "cpu") return {};
  if (count <= 0) {
    if (want == "auto") return {};
    throw UsageError("no CUDA device: " + reason);
  }
  // Ranks given their own GPUs by the launcher (Slurm --gpus-per-task) each take index 0.
  GpuSlot slot = gpu_slot(world);
  if (slot.peers > count && !share_allowed)
    throw UsageError("host " + world.host + " runs " + std::to_string(slot.peers) +
                     " ranks that see the same " + std::to_string(count) +
                     " GPU(s): start at most one rank per GPU, or use --comm mpi to let ranks "
                     "share a GPU");
  return {DeviceKind::cuda, slot.index % count};
}

Context make_context(const World& world, Communicator& host, const ContextOptions& options) {
  Context ctx;
  ctx.world = world;
  ctx.host = &host;
  const Millis deadline = std::max(options.timeout, options.startup_timeout);
  host.set_timeout(deadline);
  bool want_mpi = options.comm == "mpi";
  // Every rank must agree on the device, or some would wait in NCCL and others in MPI.
  DeviceChoice choice;
  std::string problem, no_gpu;
  if (options.comm != "auto" && options.comm != "mpi" && options.comm != "nccl") {
    problem = "--comm must be auto, mpi or nccl, not '" + options.comm + "'";
  } else {
    try {
      const GpuCounter count = [&](std::string* why) {
        const int n = options.gpu_count ? options.gpu_count(why) : cuda_device_count(why);
        if (n <= 0) no_gpu = *why;
        return n;
      };
      choice = choose_device(options.device, world, want_mpi, count);
    } catch (const UsageError& e) {
      problem = e.what();
    }
  }
  agree_or_throw(host, problem.empty(), problem);
  // Each rank chose alone, and with --device auto a rank whose GPU does not answer takes the CPU:
  // the choice itself is agreed, and a rank left on the CPU while others use GPUs is the error.
  int32_t gpu_ranks = choice.kind == DeviceKind::cuda ? 1 : 0;
  host.all_reduce(&gpu_ranks, &gpu_ranks, 1, DType::i32, ReduceOp::sum);
  const bool mixed = gpu_ranks > 0 && choice.kind != DeviceKind::cuda;
  agree_or_throw(host, !mixed,
                 "rank " + std::to_string(world.rank) + " (host " + world.host +
                     ") has no usable CUDA device (" + no_gpu + ") while " +
                     std::to_string(gpu_ranks) + " of " + std::to_string(world.size) +
                     " ranks chose a GPU (--device " + options.device +
                     "): give every rank a GPU, or pass --device cpu");
  const bool use_nccl = choice.kind == DeviceKind::cuda && !want_mpi;
  agree_or_throw(host, !(options.comm == "nccl" && choice.kind != DeviceKind::cuda),
                 "--comm nccl needs --device cuda");
  activate_device(choice);
  ctx.device = choice.kind;
  ctx.device_index = choice.index;
  if (use_nccl) {
    ctx.own_grads = make_nccl_communicator(choice.index, deadline, host);
  } else if (choice.kind == DeviceKind::cuda) {
    MpiCommOptions mo;
    mo.device_buffers = true;
    ctx.own_grads = make_mpi_communicator(mo);
  }
  if (ctx.own_grads) ctx.own_grads->set_timeout(deadline);
  ctx.grads = ctx.own_grads ? ctx.own_grads.get() : &host;
  return ctx;
}

}  // namespace lockstep
