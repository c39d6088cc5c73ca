// Device choice (--device cpu|cuda|auto): what a user sees when asking for a GPU that is not there,
// for a bad value, and when more ranks share a host than it has GPUs. The rule is tested through
// choose_device_given with any GPU count; choose_device and make_context against this machine.
#include "runtime/process/device.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"

using namespace lockstep;

namespace {

World host_with(const std::string& host, int local_rank, int local_size) {
  World w;
  w.rank = local_rank;
  w.size = local_size;
  w.local_rank = local_rank;
  w.local_size = local_size;
  w.host = host;
  return w;
}

std::string usage_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UsageError";
  return "";
}

}  // namespace

TEST(DeviceChoice, BadValueIsRefusedNamingTheChoices) {
  World w = host_with("node1", 0, 1);
  std::string msg = usage_message([&] { choose_device("gpu", w); });
  EXPECT_NE(msg.find("'gpu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu, cuda or auto"), std::string::npos) << msg;
  EXPECT_THROW(choose_device_given("", w, 4, ""), UsageError);
}

TEST(DeviceChoice, CudaWithoutGpuGivesTheRuntimesReason) {
  World w = host_with("node1", 0, 1);
  std::string msg = usage_message(
      [&] { choose_device_given("cuda", w, 0, "cudaErrorInsufficientDriver: driver too old"); });
  EXPECT_EQ("no CUDA device: cudaErrorInsufficientDriver: driver too old", msg);
}

TEST(DeviceChoice, AutoFallsBackToCpuWithoutGpu) {
  World w = host_with("node1", 0, 1);
  EXPECT_EQ(DeviceKind::cpu, choose_device_given("auto", w, 0, "no driver").kind);
  DeviceChoice gpu = choose_device_given("auto", w, 1, "");
  EXPECT_EQ(DeviceKind::cuda, gpu.kind);
  EXPECT_EQ(0, gpu.index);
  EXPECT_EQ(DeviceKind::cpu, choose_device_given("cpu", w, 8, "").kind);
}

TEST(DeviceChoice, EachRankTakesTheGpuOfItsLocalRank) {
  for (int r = 0; r < 4; ++r) {
    DeviceChoice c = choose_device_given("cuda", host_with("node1", r, 4), 4, "");
    EXPECT_EQ(DeviceKind::cuda, c.kind);
    EXPECT_EQ(r, c.index);
  }
}

TEST(DeviceChoice, MoreLocalRanksThanGpusShareThemRoundRobin) {
  World w = host_with("node07", 5, 8);
  DeviceChoice c = choose_device_given("cuda", w, 4, "");
  EXPECT_EQ(DeviceKind::cuda, c.kind);
  EXPECT_EQ(1, c.index);
  EXPECT_EQ(0, choose_device_given("cuda", w, 1, "").index);
}

// Every rank's claim (host, GPU UUID) for a layout of hosts and GPUs.
std::vector<GpuClaim> claims(const std::vector<std::pair<std::string, std::string>>& layout) {
  std::vector<GpuClaim> out;
  for (const auto& [host, gpu] : layout) out.push_back({host, gpu});
  return out;
}

TEST(GpuSharing, RanksOnOneGpuByUuidNameHostAndBothCounts) {
  // 8 ranks over 4 GPUs on node07 (round robin): refused, naming the host and both counts.
  std::vector<std::pair<std::string, std::string>> layout;
  for (int r = 0; r < 8; ++r) layout.push_back({"node07", "GPU-" + std::to_string(r % 4)});
  const std::string msg = gpu_sharing_problem(claims(layout), false);
  EXPECT_NE(msg.find("node07"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8 ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 GPU"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--comm mpi"), std::string::npos) << msg;
  EXPECT_EQ("", gpu_sharing_problem(claims(layout), /*share_allowed=*/true)) << "--comm mpi";
}

TEST(GpuSharing, PerTaskGpusThatAllReadZeroAreDistinctGpus) {
  // Slurm's per-task device cgroups: every task's CUDA_VISIBLE_DEVICES is "0" and it sees one
  // GPU, index 0 - its own, as the UUIDs show.
  std::vector<std::pair<std::string, std::string>> layout;
  for (int r = 0; r < 8; ++r) layout.push_back({"node1", "GPU-aaaa-" + std::to_string(r)});
  EXPECT_EQ("", gpu_sharing_problem(claims(layout), false));
  // The same GPU UUID on two hosts is two GPUs (a UUID is per GPU; hosts are told apart first).
  EXPECT_EQ("", gpu_sharing_problem(claims({{"a", "GPU-1"}, {"b", "GPU-1"}}), false));
}

TEST(GpuSharing, DistinctSpellingsOfOneGpuAreOneGpu) {
  // CUDA_VISIBLE_DEVICES "0" on rank 0 and "GPU-<uuid of 0>" on rank 1: different strings, one
  // GPU.
  const std::string msg =
      gpu_sharing_problem(claims({{"node2", "GPU-1234"}, {"node2", "GPU-1234"}}), false);
  EXPECT_NE(msg.find("node2 runs 2 ranks that see the same 1 GPU"), std::string::npos) << msg;
}

TEST(DeviceChoice, ThisMachineAnswersCudaWithGpuOrTheReason) {
  World w = host_with("here", 0, 1);
  std::string reason;
  int gpus = cuda_device_count(&reason);
  if (gpus > 0) {
    EXPECT_EQ(DeviceKind::cuda, choose_device("cuda", w).kind);
    EXPECT_EQ(DeviceKind::cuda, choose_device("auto", w).kind);
    return;
  }
  EXPECT_FALSE(reason.empty()) << "no GPU and no reason why";
  std::string msg = usage_message([&] { choose_device("cuda", w); });
  EXPECT_EQ("no CUDA device: " + reason, msg);
  EXPECT_EQ(DeviceKind::cpu, choose_device("auto", w).kind);
}

TEST(DeviceChoice, ContextForCudaWithoutGpuFailsOnEveryRankWithTheReason) {
  std::string reason;
  if (cuda_device_count(&reason) > 0) GTEST_SKIP() << "this machine has a GPU";
  World world = discover_world();
  auto host = make_mpi_communicator();
  ContextOptions options;
  options.device = "cuda";
  std::string msg = usage_message([&] { make_context(world, *host, options); });
  EXPECT_EQ(0u, msg.rfind("no CUDA device: ", 0)) << msg;
  options.device = "auto";
  Context ctx = make_context(world, *host, options);
  EXPECT_EQ(DeviceKind::cpu, ctx.device);
  // On the CPU the gradients go over the world's host communicator itself: no second one.
  EXPECT_EQ(host.get(), ctx.host);
  EXPECT_EQ(host.get(), ctx.grads);
  EXPECT_EQ(nullptr, ctx.own_grads);
  EXPECT_EQ(Backend::mpi, ctx.grads->backend());
}
