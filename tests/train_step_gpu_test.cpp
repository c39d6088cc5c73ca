// Training on the GPU against the same training on the CPU (the oracle): the same data, seed and
// configuration must give the same result, within the fp32 summation-order tolerance of the
// kernels' parity test (1e-4 relative): one SGD step's update (the gradient it followed); several
// steps with momentum, gradient accumulation, one bucket per layer and clipping; a checkpoint
// written on one device and resumed on the other. Every step accumulates three micro-batches, so
// the device step's two pinned and device batch slots are reused within a step. Evaluation scores
// the test split alike. bf16 compute (bf16 GEMMs, fp32 master weights) is compared within bf16
// rounding. Skips, with the reason, where no GPU answers. Also the pieces the device step feeds
// batches with: pinned host memory, copies on a copy stream, and an event that makes the compute
// stream wait for them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <utility>

#include "gpu_test_util.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"
#include "runtime/train/step.h"
#include "runtime/train/train_checkpoint.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using lockstep::testing_util::one_step;
using lockstep::testing_util::relative_difference;
using lockstep::testing_util::several_steps;

namespace {

// 64 training images (10, 10, 1) in 4 classes; 16 test images.
std::string write_images() {
  return testing_util::write_striped_images(
      testing_util::local_temp_dir("train_step_gpu") + "/images.h5", testing_util::StripedImages{});
}

std::vector<float> params_of(Trainer& t) { return t.model().params_to_host(); }

std::vector<float> trained(Communicator& comm, const TrainConfig& c) {
  Trainer t(comm, c);
  t.run();
  return params_of(t);
}

// The parameters training starts from (drawn on the host from the seed, whatever the device).
std::vector<float> initial(Communicator& comm, const TrainConfig& c) {
  Trainer t(comm, c);
  t.init_params();
  return params_of(t);
}

// got - start, as a vector.
std::vector<float> moved(const std::vector<float>& got, const std::vector<float>& start) {
  std::vector<float> d(got.size());
  for (size_t i = 0; i < got.size() && i < start.size(); ++i) d[i] = got[i] - start[i];
  return d;
}

double compare(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return INFINITY;
  const double rel = relative_difference(got, want);
  std::printf("%s: relative L2 difference %.3g\n", what, rel);
  return rel;
}

// The update of one step on the GPU against the update of the same step on the CPU.
void expect_gpu_step_matches_cpu(Precision precision, double tolerance) {
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  auto comm = make_mpi_communicator();
  const std::string data = write_images();
  const TrainConfig cpu = one_step(data, DeviceKind::cpu, Precision::fp32);
  const std::vector<float> start = initial(*comm, cpu);
  std::vector<float> want = moved(trained(*comm, cpu), start);
  const TrainConfig gpu = one_step(data, DeviceKind::cuda, precision);
  std::vector<float> got = moved(trained(*comm, gpu), start);
  const std::string what = std::string("one SGD step's update, ") + precision_name(precision) +
                           " on the GPU vs fp32 on the CPU";
  EXPECT_LT(compare(what.c_str(), got, want), tolerance);
}

}  // namespace

TEST(TrainStepGpu, Fp32StepMatchesCpu) { expect_gpu_step_matches_cpu(Precision::fp32, 1e-4); }

// bf16 rounds every GEMM input to 8 significant bits (2^-9 relative), and the rounding grows
// through three GEMM layers forward and back: the kernels' bf16 test sees about 1e-2 on the
// gradients of a four-layer model and allows 3e-2. A wrong or stale gradient is off by order 1.
TEST(TrainStepGpu, Bf16StepIsCloseToCpu) { expect_gpu_step_matches_cpu(Precision::bf16, 5e-2); }

TEST(TrainStepGpu, AccumulatedBucketedClippedStepsMatchCpu) {
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  auto comm = make_mpi_communicator();
  const std::string data = write_images();
  std::vector<float> want = trained(*comm, several_steps(data, DeviceKind::cpu));
  std::vector<float> got = trained(*comm, several_steps(data, DeviceKind::cuda));
  EXPECT_LT(compare("5 steps, grad-accum 3, bucket per layer, clip 0.5", got, want), 1e-4);
}

TEST(TrainStepGpu, EvaluationMatchesCpu) {
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  auto comm = make_mpi_communicator();
  const std::string data = write_images();
  TrainConfig c = several_steps(data, DeviceKind::cpu);
  c.steps = 0;
  c.epochs = 3;
  c.eval_every_epoch = true;
  Trainer cpu(*comm, c);
  TrainResult want = cpu.run();
  c.device = DeviceKind::cuda;
  Trainer gpu(*comm, c);
  TrainResult got = gpu.run();
  ASSERT_EQ(got.epochs.size(), want.epochs.size());
  EXPECT_EQ(got.test.samples, 16);
  EXPECT_EQ(got.test.samples, want.test.samples);
  EXPECT_NEAR(got.test.loss, want.test.loss, 1e-4 * (1 + std::fabs(want.test.loss)));
  // A sample whose two best logits tie within rounding may flip: at most one of the 16.
  EXPECT_NEAR(got.test.accuracy, want.test.accuracy, 1.0 / 16 + 1e-9);
  for (size_t e = 0; e < want.epochs.size(); ++e)
    EXPECT_NEAR(got.epochs[e].train_loss, want.epochs[e].train_loss,
                1e-4 * (1 + std::fabs(want.epochs[e].train_loss)))
        << "epoch " << e + 1;
  std::printf("after 3 epochs: test loss %.6f (GPU) vs %.6f (CPU), accuracy %.4f vs %.4f\n",
              got.test.loss, want.test.loss, got.test.accuracy, want.test.accuracy);
}

// A run of 4 steps split at step 2 by a checkpoint written on `first` and resumed on `second`
// ends where 4 uninterrupted steps on the CPU end.
void expect_resume_across_devices(DeviceKind first, DeviceKind second) {
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  auto comm = make_mpi_communicator();
  const std::string data = write_images();
  const std::string dir = testing_util::local_temp_dir("train_step_gpu") + "/ckpt-" +
                          device_kind_name(first) + "-" + device_kind_name(second);
  std::filesystem::remove_all(dir);
  TrainConfig c = several_steps(data, DeviceKind::cpu);
  c.optimizer.kind = OptimizerKind::adam;  // state buffers m and v cross over too
  c.lr = 1e-3;
  c.steps = 4;
  std::vector<float> want = trained(*comm, c);

  TrainConfig half = c;
  half.steps = 2;
  half.device = first;
  half.guard.checkpoint_dir = dir;
  Trainer a(*comm, half);
  a.run();
  ASSERT_FALSE(a.guard().last_checkpoint().empty());

  TrainConfig rest = c;
  rest.device = second;
  Trainer b(*comm, rest);
  resume_from_checkpoint(b, dir);
  EXPECT_EQ(b.state().global_step, 2);
  b.run();
  EXPECT_EQ(b.optimizer().steps(), 4);
  const std::string what = std::string("checkpoint at step 2 on ") + device_kind_name(first) +
                           ", resumed on " + device_kind_name(second) + ", vs 4 steps on the CPU";
  EXPECT_LT(compare(what.c_str(), params_of(b), want), 1e-4);
}

TEST(TrainStepGpu, CheckpointFromGpuResumesOnCpu) {
  expect_resume_across_devices(DeviceKind::cuda, DeviceKind::cpu);
}

TEST(TrainStepGpu, CheckpointFromCpuResumesOnGpu) {
  expect_resume_across_devices(DeviceKind::cpu, DeviceKind::cuda);
}

// The Trainer stages the next step's batch before this step's read-back (step.h: stage); an
// evaluation may upload other batches before it is used. Those take the other slot: the staged
// batch's inputs survive them, and an upload of another batch that carries the same epoch and
// step numbers is not taken for it.
TEST(TrainStepGpu, StagedBatchSurvivesUploadsInBetween) {
  if (std::string why = testing_util::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const StepShape shape{.input_size = 8, .outputs = 3, .max_rows = 4};
  std::unique_ptr<Step> step = make_step(DeviceKind::cuda, shape);
  const cudaStream_t compute = step->placement(Precision::fp32).stream;
  auto batch = [](int epoch, int64_t number, float base) {
    Batch b;
    b.epoch = epoch;
    b.step = number;
    b.rows = b.valid = b.global_valid = 4;
    b.x.resize(32);
    for (size_t i = 0; i < b.x.size(); ++i) b.x[i] = base + static_cast<float>(i);
    b.labels = {0, 1, 2, 0};
    b.mask.assign(4, 1.0f);
    b.index = {0, 1, 2, 3};
    return b;
  };
  auto read = [&](const float* device) {
    kernels::cuda_stream_synchronize(compute);
    std::vector<float> v(32);
    kernels::cuda_copy_to_host(v.data(), device, v.size() * sizeof(float));
    return v;
  };
  Batch first = batch(0, 0, 0), next = batch(0, 1, 100);
  EXPECT_EQ(read(step->upload(first)), first.x);
  step->release();
  step->stage(next);
  for (int k = 0; k < 3; ++k) {
    const Batch eval = batch(0, 1, 1000.0f + 100.0f * k);  // the staged batch's numbers
    EXPECT_EQ(read(step->upload(eval)), eval.x) << "evaluation batch " << k;
    step->release();
  }
  Batch current;
  std::swap(current, next);  // as the Trainer does
  EXPECT_EQ(read(step->upload(current)), current.x) << "the staged batch after 3 uploads";
  step->release();
  const Batch after = batch(0, 2, 5000);
  EXPECT_EQ(read(step->upload(after)), after.x);
  step->release();
}

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
