#include "runtime/process/device.h"

#include "runtime/base/error.h"
#include "runtime/comm/agree.h"
#include "runtime/process/launch_env.h"

namespace lockstep {

DeviceChoice choose_device(const std::string& want, const World& world, bool share_allowed) {
  // --device cpu never wakes the CUDA runtime.
  if (want != "cuda" && want != "auto")
    return choose_device_given(want, world, share_allowed, 0, "");
  std::string reason;
  int count = cuda_device_count(&reason);
  return choose_device_given(want, world, share_allowed, count, reason);
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
  host.set_timeout(options.timeout);
  bool want_mpi = options.comm == "mpi";
  // Every rank must agree on the device, or some would wait in NCCL and others in MPI.
  DeviceChoice choice;
  std::string problem;
  if (options.comm != "auto" && options.comm != "mpi" && options.comm != "nccl") {
    problem = "--comm must be auto, mpi or nccl, not '" + options.comm + "'";
  } else {
    try {
      choice = choose_device(options.device, world, want_mpi);
    } catch (const UsageError& e) {
      problem = e.what();
    }
  }
  agree_or_throw(host, problem.empty(), problem);
  activate_device(choice);
  ctx.device = choice.kind;
  ctx.device_index = choice.index;
  bool use_nccl = choice.kind == DeviceKind::cuda && !want_mpi;
  if (options.comm == "nccl" && choice.kind != DeviceKind::cuda)
    agree_or_throw(host, false, "--comm nccl needs --device cuda");
  if (use_nccl) {
    ctx.own_grads = make_nccl_communicator(choice.index, options.timeout);
  } else if (choice.kind == DeviceKind::cuda) {
    MpiCommOptions mo;
    mo.device_buffers = true;
    ctx.own_grads = make_mpi_communicator(mo);
  }
  if (ctx.own_grads) ctx.own_grads->set_timeout(options.timeout);
  ctx.grads = ctx.own_grads ? ctx.own_grads.get() : &host;
  return ctx;
}

}  // namespace lockstep
