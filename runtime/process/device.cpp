#include "runtime/process/device.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

#include "runtime/base/error.h"
#include "runtime/base/log.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/process/launch_env.h"

namespace lockstep {

namespace {

std::string too_many_ranks(const std::string& host, int ranks, int gpus) {
  return "host " + host + " runs " + std::to_string(ranks) + " ranks that see the same " +
         std::to_string(gpus) +
         " GPU(s): start at most one rank per GPU, or use --comm mpi to "
         "let ranks share a GPU";
}

}  // namespace

bool test_only_nccl_shares_gpu() {
  static const bool on = [] {
    const char* v = std::getenv(kTestOnlyNcclSharesGpuEnv);
    const bool set = v != nullptr && std::strcmp(v, "1") == 0;
    if (set) {
      LS_LOG(warn) << kTestOnlyNcclSharesGpuEnv << "=1: ranks may share a GPU over NCCL (a test "
                   << "switch: NCCL accepts it only for ranks given different NCCL_HOSTID values, "
                   << "which it then treats as separate hosts)";
    }
    return set;
  }();
  return on;
}

DeviceChoice choose_device(const std::string& want, const World& world,
                           const GpuCounter& gpu_count) {
  // --device cpu never wakes the CUDA runtime.
  if (want != "cuda" && want != "auto") return choose_device_given(want, world, 0, "");
  std::string reason;
  int count = gpu_count ? gpu_count(&reason) : cuda_device_count(&reason);
  return choose_device_given(want, world, count, reason);
}

DeviceChoice choose_device_given(const std::string& want, const World& world, int count,
                                 const std::string& reason) {
  if (want != "cpu" && want != "cuda" && want != "auto")
    throw UsageError("--device must be cpu, cuda or auto, not '" + want + "'");
  if (want == "cpu") return {};
  if (count <= 0) {
    if (want == "auto") return {};
    throw UsageError("no CUDA device: " + reason);
  }
  // Ranks given their own GPUs by the launcher (Slurm --gpus-per-task) each take index 0. Whether
  // ranks end up sharing a GPU is judged afterwards by its UUID (check_gpu_sharing).
  const GpuSlot slot = gpu_slot(world);
  return {DeviceKind::cuda, slot.index % count};
}

std::string gpu_sharing_problem(const std::vector<GpuClaim>& claims, bool share_allowed) {
  if (share_allowed) return "";
  for (size_t i = 0; i < claims.size(); ++i) {
    const GpuClaim& c = claims[i];
    if (c.gpu.empty()) continue;
    int sharing = 0;
    std::set<std::string> gpus;
    int ranks = 0;
    for (size_t j = 0; j < claims.size(); ++j) {
      if (claims[j].host != c.host) continue;
      ranks += 1;
      if (!claims[j].gpu.empty()) gpus.insert(claims[j].gpu);
      if (claims[j].gpu == c.gpu) sharing += 1;
    }
    if (sharing > 1)
      return too_many_ranks(c.host, ranks, static_cast<int>(gpus.size())) + " (" +
             std::to_string(sharing) + " of them on " + c.gpu + ")";
  }
  return "";
}

void check_gpu_sharing(Communicator& host, const World& world, const DeviceChoice& choice,
                       bool share_allowed, const std::function<std::string(int)>& uuid) {
  if (choice.kind != DeviceKind::cuda) return;
  // Fixed-size records: host name, then the GPU's UUID.
  constexpr size_t kField = 96;
  std::vector<char> mine(2 * kField, '\0');
  const std::string gpu = uuid ? uuid(choice.index) : cuda_device_uuid(choice.index);
  world.host.copy(mine.data(), kField - 1);
  gpu.copy(mine.data() + kField, kField - 1);
  std::vector<char> all(mine.size() * static_cast<size_t>(host.size()));
  host.all_gather(mine.data(), all.data(), mine.size(), DType::u8);
  std::vector<GpuClaim> claims;
  for (int r = 0; r < host.size(); ++r) {
    const char* rec = all.data() + static_cast<size_t>(r) * mine.size();
    claims.push_back({std::string(rec), std::string(rec + kField)});
  }
  const std::string problem =
      gpu_sharing_problem(claims, share_allowed || test_only_nccl_shares_gpu());
  agree_or_throw(host, problem.empty(), problem);
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
      choice = choose_device(options.device, world, count);
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
  check_gpu_sharing(host, world, choice, want_mpi, options.gpu_uuid);
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
