// Device choice (--device cpu|cuda|auto): what a user sees when asking for a GPU that is not there,
// for a bad value, and when more ranks share a host than it has GPUs. The rule is tested through
// choose_device_given with any GPU count; choose_device and make_context against this machine.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"
#include "runtime/process/device.h"

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
  std::string msg = usage_message([&] { choose_device("gpu", w, false); });
  EXPECT_NE(msg.find("'gpu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu, cuda or auto"), std::string::npos) << msg;
  EXPECT_THROW(choose_device_given("", w, false, 4, ""), UsageError);
}

TEST(DeviceChoice, CudaWithoutGpuGivesTheRuntimesReason) {
  World w = host_with("node1", 0, 1);
  std::string msg = usage_message([&] {
    choose_device_given("cuda", w, false, 0, "cudaErrorInsufficientDriver: driver too old");
  });
  EXPECT_EQ("no CUDA device: cudaErrorInsufficientDriver: driver too old", msg);
}

TEST(DeviceChoice, AutoFallsBackToCpuWithoutGpu) {
  World w = host_with("node1", 0, 1);
  EXPECT_EQ(DeviceKind::cpu, choose_device_given("auto", w, false, 0, "no driver").kind);
  DeviceChoice gpu = choose_device_given("auto", w, false, 1, "");
  EXPECT_EQ(DeviceKind::cuda, gpu.kind);
  EXPECT_EQ(0, gpu.index);
  EXPECT_EQ(DeviceKind::cpu, choose_device_given("cpu", w, false, 8, "").kind);
}

TEST(DeviceChoice, EachRankTakesTheGpuOfItsLocalRank) {
  for (int r = 0; r < 4; ++r) {
    DeviceChoice c = choose_device_given("cuda", host_with("node1", r, 4), false, 4, "");
    EXPECT_EQ(DeviceKind::cuda, c.kind);
    EXPECT_EQ(r, c.index);
  }
}

TEST(DeviceChoice, MoreLocalRanksThanGpusNamesHostAndBothCounts) {
  World w = host_with("node07", 5, 8);
  std::string msg = usage_message([&] { choose_device_given("cuda", w, false, 4, ""); });
  EXPECT_NE(msg.find("node07"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8 ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 GPU"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--comm mpi"), std::string::npos) << msg;
  // auto does not hide the problem by falling back to the CPU.
  EXPECT_THROW(choose_device_given("auto", w, false, 4, ""), UsageError);
}

TEST(DeviceChoice, MpiCommunicatorLetsRanksShareGpus) {
  World w = host_with("node07", 5, 8);
  DeviceChoice c = choose_device_given("cuda", w, /*share_allowed=*/true, 4, "");
  EXPECT_EQ(DeviceKind::cuda, c.kind);
  EXPECT_EQ(1, c.index);
  EXPECT_EQ(0, choose_device_given("cuda", w, true, 1, "").index);
}

TEST(DeviceChoice, ThisMachineAnswersCudaWithGpuOrTheReason) {
  World w = host_with("here", 0, 1);
  std::string reason;
  int gpus = cuda_device_count(&reason);
  if (gpus > 0) {
    EXPECT_EQ(DeviceKind::cuda, choose_device("cuda", w, false).kind);
    EXPECT_EQ(DeviceKind::cuda, choose_device("auto", w, false).kind);
    return;
  }
  EXPECT_FALSE(reason.empty()) << "no GPU and no reason why";
  std::string msg = usage_message([&] { choose_device("cuda", w, false); });
  EXPECT_EQ("no CUDA device: " + reason, msg);
  EXPECT_EQ(DeviceKind::cpu, choose_device("auto", w, false).kind);
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
