// One training step on the GPU against the same step on the CPU (the oracle): the same data,
// seed and configuration must give the same parameters after one update, within the fp32
// summation-order tolerance of the kernels' parity test (1e-4 relative), and within bf16 rounding
// (1e-2) with --precision bf16. Skips, with the reason, where no GPU answers, and where this
// build's trainer refuses --device cuda (its message says what is missing). Also the pieces the
// device step feeds batches with: pinned host memory, copies on a copy stream, and an event that
// makes the compute stream wait for them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu_test_util.h"
#include "kernels/cuda_memory.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/h5_writer.h"
#include "runtime/hdf5_util.h"
#include "runtime/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using lockstep::testing_util::relative_difference;

namespace {

// 64 training images (10, 10, 1) in 4 classes; 16 test images.
std::string write_images() {
  return testing_util::write_striped_images(
      testing_util::local_temp_dir("train_step_gpu") + "/images.h5", testing_util::StripedImages{});
}

TrainConfig one_step(const std::string& data, DeviceKind device, Precision precision) {
  TrainConfig c;
  c.train.path = data;
  c.model = "conv3x3:8,relu,maxpool2,flatten,dense:16,relu,dense";
  c.optimizer.kind = OptimizerKind::adam;
  c.lr = 1e-3;
  c.global_batch = 32;
  c.steps = 1;
  c.seed = 4;
  c.eval_every_epoch = false;
  c.print = false;
  c.device = device;
  c.precision = precision;
  return c;
}

void expect_gpu_step_matches_cpu(Precision precision, double tolerance) {
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  auto comm = make_mpi_communicator();
  const std::string data = write_images();
  Trainer cpu(*comm, one_step(data, DeviceKind::cpu, Precision::fp32));
  cpu.run();
  std::vector<float> want(cpu.model().params(), cpu.model().params() + cpu.model().param_count());
  std::unique_ptr<Trainer> gpu;
  try {
    gpu = std::make_unique<Trainer>(*comm, one_step(data, DeviceKind::cuda, precision));
  } catch (const UsageError& e) {
    if (std::string(e.what()).find("GPU training is not finished") != std::string::npos)
      GTEST_SKIP() << e.what();
    throw;
  }
  gpu->run();
  // Trainer::model().params() is the host view of the parameters after run().
  std::vector<float> got(gpu->model().params(), gpu->model().params() + gpu->model().param_count());
  ASSERT_EQ(got.size(), want.size());
  double rel = relative_difference(got, want);
  std::printf("one step, %s on the GPU vs fp32 on the CPU: relative L2 difference %.3g\n",
              precision_name(precision), rel);
  EXPECT_LT(rel, tolerance);
}

}  // namespace

TEST(TrainStepGpu, Fp32StepMatchesCpu) { expect_gpu_step_matches_cpu(Precision::fp32, 1e-4); }

TEST(TrainStepGpu, Bf16StepIsCloseToCpu) { expect_gpu_step_matches_cpu(Precision::bf16, 1e-2); }

TEST(TrainStepGpu, PinnedBatchReachesComputeStreamThroughAnEvent) {
  namespace lk = lockstep::kernels;
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const size_t n = 1 << 20;
  auto* host = static_cast<float*>(lk::cuda_host_alloc(n * sizeof(float)));
  auto* back = static_cast<float*>(lk::cuda_host_alloc(n * sizeof(float)));
  void* device = lk::cuda_alloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  cudaStream_t copy = lk::cuda_stream_create(), compute = lk::cuda_stream_create();
  cudaEvent_t ready = lk::cuda_event_create();
  lk::cuda_copy_to_device_async(device, host, n * sizeof(float), copy);
  lk::cuda_event_record(ready, copy);
  lk::cuda_stream_wait_event(compute, ready);
  lk::cuda_copy_to_host_async(back, device, n * sizeof(float), compute);
  lk::cuda_stream_synchronize(compute);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += back[i] != host[i];
  EXPECT_EQ(wrong, 0u) << "the compute stream read the batch before its copy finished";
  lk::cuda_event_destroy(ready);
  lk::cuda_stream_destroy(copy);
  lk::cuda_stream_destroy(compute);
  lk::cuda_free(device);
  lk::cuda_host_free(host);
  lk::cuda_host_free(back);
}
