// A trainer over the NCCL backend (one rank on GPU 0) against the same training on the CPU over
// MPI: the gradient buckets are reduced in place on the device by NCCL, ordered after the compute
// stream, with fp32 and with bf16 on the wire (--grad-reduce-dtype bf16: both trainers round the
// gradients to bf16 alike), over several accumulated, bucketed, clipped momentum steps. The
// communicator outlives its trainers: once they are gone (with their compute streams) it still
// works. Skips, with the reason, where no GPU answers or the build has no CUDA.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

// 64 training images (10, 10, 1) in 4 classes; 16 test images.
std::string write_images() {
  return write_striped_images(local_temp_dir("train_nccl_gpu") + "/images.h5", StripedImages{});
}

// several_steps (train_fixtures.h) with `wire` as the gradients' all-reduce type.
TrainConfig steps(const std::string& data, DeviceKind device, Precision wire) {
  TrainConfig c = several_steps(data, device);
  c.grad_reduce_dtype = wire;
  return c;
}

// Host values over `host`, the gradients over `grads` (the same communicator on the CPU).
std::vector<float> trained(Communicator& host, Communicator& grads, const TrainConfig& c) {
  Trainer t(host, grads, c);
  t.run();
  EXPECT_EQ(t.state().global_step, c.steps);
  return t.model().params_to_host();
}

using NcclTrainer = OnGpu0;

}  // namespace

TEST_F(NcclTrainer, MatchesTheCpuTrainerWithFp32AndBf16Reductions) {
  auto nccl = make_nccl_communicator(0, std::chrono::seconds(120));
  ASSERT_EQ(Backend::nccl, nccl->backend());
  auto mpi = make_mpi_communicator();
  const std::string data = write_images();
  // fp32: only the summation order differs (the kernels' parity tolerance). bf16 on the wire:
  // both round the same gradients to bf16, so they differ only where an fp32 gradient lies within
  // its summation-order difference of a bf16 rounding boundary (one bf16 ulp, 2^-8, on a few
  // elements).
  for (auto [wire, tolerance] :
       {std::pair{Precision::fp32, 1e-4}, std::pair{Precision::bf16, 1e-3}}) {
    SCOPED_TRACE(std::string("--grad-reduce-dtype ") + precision_name(wire));
    const std::vector<float> want = trained(*mpi, *mpi, steps(data, DeviceKind::cpu, wire));
    const std::vector<float> got = trained(*mpi, *nccl, steps(data, DeviceKind::cuda, wire));
    ASSERT_EQ(got.size(), want.size());
    const double rel = relative_difference(got, want);
    std::printf("NCCL trainer vs CPU trainer, %s on the wire: relative L2 difference %.3g\n",
                precision_name(wire), rel);
    EXPECT_LT(rel, tolerance);
  }
  // The trainers and their compute streams are gone: a communicator still ordered after one of
  // them would record its next event on a destroyed stream.
  const std::vector<float> ones(256, 1.0f);
  void* buf = kernels::cuda_alloc(ones.size() * sizeof(float));
  kernels::cuda_copy_to_device(buf, ones.data(), ones.size() * sizeof(float));
  EXPECT_NO_THROW(nccl->all_reduce(buf, buf, ones.size(), DType::f32, ReduceOp::sum));
  std::vector<float> back(ones.size());
  kernels::cuda_copy_to_host(back.data(), buf, back.size() * sizeof(float));
  kernels::cuda_free(buf);
  EXPECT_EQ(back, ones) << "a sum over one rank is the rank's own values";
  EXPECT_NO_THROW(nccl->barrier());
}
