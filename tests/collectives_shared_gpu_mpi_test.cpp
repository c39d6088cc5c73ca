// The collective cases of collective_cases.h on the MPI backend with device buffers staged through
// host memory, every rank on GPU 0: how several ranks share one GPU (NCCL refuses that), and how
// multi-rank GPU code is tested on a machine with one GPU. ctest runs it at 1, 2 and 4 ranks.
// Skips, with the reason, where no GPU answers or the build has no CUDA.
#include <gtest/gtest.h>

#include <string>

#include "collective_cases.h"
#include "gpu_test_util.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/process/context.h"
#include "runtime/process/device.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

using SharedGpuMpiCollectives = OnGpu0;

SharedCases& shared() {
  static SharedCases cases(
      [] {
        MpiCommOptions options;
        options.device_buffers = true;
        auto comm = make_mpi_communicator(options);
        comm->set_timeout(std::chrono::seconds(300));
        return comm;
      },
      device_buffer_ops);
  return cases;
}

class SharedGpuMpiTypeMatrix : public OnGpu0, public testing::WithParamInterface<DType> {
 protected:
  static void TearDownTestSuite() { shared().release(); }
};

class SharedGpuMpiLarge : public OnGpu0, public testing::WithParamInterface<LargeCase> {
 protected:
  static void TearDownTestSuite() { shared().release(); }
};

}  // namespace

TEST_P(SharedGpuMpiTypeMatrix, EveryOpAndSizeOnDeviceBuffers) {
  run_type_matrix(shared().comm(), shared().buffers(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, SharedGpuMpiTypeMatrix, testing::ValuesIn(all_dtypes()),
                         dtype_case_name);

TEST_P(SharedGpuMpiLarge, SixtyFourMiBOnDeviceBuffers) {
  run_large_case(shared().comm(), shared().buffers(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, SharedGpuMpiLarge, testing::ValuesIn(large_cases()),
                         large_case_name);

TEST_F(SharedGpuMpiCollectives, ContextSharesGpusOnlyWithMpiCommunicator) {
  World world = discover_world();
  auto host = make_mpi_communicator();
  std::string reason;
  const int gpus = cuda_device_count(&reason);
  ContextOptions options;
  options.device = "cuda";
  options.comm = "mpi";
  {
    Context ctx = make_context(world, *host, options);
    EXPECT_EQ(DeviceKind::cuda, ctx.device);
    EXPECT_GE(ctx.device_index, 0);
    EXPECT_LT(ctx.device_index, gpus);
    EXPECT_EQ(host.get(), ctx.host);
    EXPECT_EQ(Backend::mpi, ctx.grads->backend());
    EXPECT_TRUE(ctx.grads->device_buffers());
    EXPECT_EQ(world.size, ctx.grads->size());
    ctx.grads->barrier();
  }
  if (world.local_size <= gpus) return;
  // More ranks on this host than GPUs: without --comm mpi every rank refuses, naming the counts.
  options.comm = "auto";
  try {
    make_context(world, *host, options);
    ADD_FAILURE() << world.local_size << " ranks got a context on " << gpus << " GPU(s)";
  } catch (const UsageError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(world.host), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(world.local_size) + " ranks"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(gpus) + " GPU"), std::string::npos) << msg;
  }
}
