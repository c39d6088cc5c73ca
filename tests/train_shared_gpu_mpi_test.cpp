// Training on one GPU shared by every rank over the MPI backend with device buffers (the way
// several ranks use one GPU, which NCCL refuses, and how multi-rank GPU training is tested on a
// machine with one GPU): P ranks on the GPU end with the parameters P ranks reach on the CPU, for
// the same data, seed and configuration (a partial, masked last batch, gradient accumulation over
// three micro-batches, so the device step's batch slots are reused within a step, a bucket per
// layer). The trainer reduces the gradients over the device-buffer communicator and its
// host values over an MPI communicator of its own. ctest runs it at 1, 2 and 4 ranks. Skips, with
// the reason, where no GPU answers or the build has no CUDA.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "gpu_test_util.h"
#include "runtime/base/communicator.h"
#include "runtime/process/device.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

// 76 training images (12, 12, 1) in 4 classes: 76 is not a multiple of the global batch of 24, so
// each epoch ends with a masked partial batch; 20 test images.
const std::string& data_file() {
  static const std::string path = [] {
    const std::string path = shared_temp_dir("train_shared_gpu") + "/images.h5";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      StripedImages s;
      s.side = 12, s.train_rows = 76, s.test_rows = 20;
      write_striped_images(path, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
  }();
  return path;
}

TrainConfig config(DeviceKind device) {
  TrainConfig c;
  c.train.path = data_file();
  c.model = "conv3x3:4,relu,maxpool2,flatten,dense:8,relu,dense";
  c.optimizer.kind = OptimizerKind::momentum;
  c.lr = 0.05;
  c.global_batch = 24;
  c.grad_accum = 3;  // micro-batches of 8: 2 rows per rank at P = 4
  c.bucket_mb = 1e-6;
  c.epochs = 1;
  c.seed = 5;
  c.check_every = 2;
  c.print = false;
  c.device = device;
  return c;
}

using SharedGpuTraining = OnGpu0;

}  // namespace

TEST_F(SharedGpuTraining, RanksOnOneGpuMatchTheSameRanksOnTheCpu) {
  auto host = make_mpi_communicator();
  Trainer cpu(*host, config(DeviceKind::cpu));
  TrainResult want = cpu.run();
  const std::vector<float> cpu_params = cpu.model().params_to_host();

  MpiCommOptions options;
  options.device_buffers = true;
  auto device = make_mpi_communicator(options);
  device->set_timeout(std::chrono::seconds(300));
  Trainer gpu(*host, *device, config(DeviceKind::cuda));
  EXPECT_EQ(&gpu.comm(), host.get()) << "host values left the host communicator given";
  TrainResult got = gpu.run();
  const std::vector<float> gpu_params = gpu.model().params_to_host();

  const double rel = relative_difference(gpu_params, cpu_params);
  if (host->rank() == 0)
    std::printf(
        "%d rank(s) sharing a GPU vs the CPU: relative L2 difference %.3g, test loss "
        "%.6f vs %.6f\n",
        host->size(), rel, got.test.loss, want.test.loss);
  EXPECT_LT(rel, 1e-4);
  EXPECT_EQ(got.test.samples, want.test.samples);
  EXPECT_NEAR(got.test.loss, want.test.loss, 1e-4 * (1 + want.test.loss));
  // The parameters are the same on every rank (the trainer's replica check passed, and again here).
  gpu.verify_replicas("in the test");
}
