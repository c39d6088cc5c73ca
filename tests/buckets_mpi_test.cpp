// Bucketed gradient reduction in the trainer: many small buckets started during the backward pass
// end at the same parameters as one all-reduce after it (each element is reduced once either way,
// so the sums are the same), with and without gradient accumulation; a bf16 wire dtype stays
// close to fp32 but is not free; bf16 compute and an unfinished GPU path are refused in words.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>

#include "runtime/base/error.h"
#include "runtime/comm/buckets.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"
#include "runtime/process/device.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using lockstep::testing_util::relative_difference;

namespace {

// 96 training images (12, 12, 1) in 4 classes whose brightness pattern differs by class; 16 test
// images. 96 is not a multiple of 40, so each epoch ends with a masked partial batch.
const std::string& data_file() {
  static const std::string path = [] {
    const std::string p = testing_util::shared_temp_dir("buckets") + "/images.h5";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      testing_util::StripedImages s;
      s.side = 12, s.train_rows = 96, s.test_rows = 16, s.seed = 3;
      testing_util::write_striped_images(p, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return p;
  }();
  return path;
}

TrainConfig config(double bucket_mb) {
  TrainConfig c;
  c.train.path = data_file();
  c.model = "conv3x3:8,relu,maxpool2,conv3x3:8,relu,flatten,dense:16,relu,dense";
  c.optimizer.kind = OptimizerKind::momentum;
  c.lr = 0.01;
  c.global_batch = 40;
  c.steps = 6;
  c.seed = 5;
  c.check_every = 2;
  c.eval_every_epoch = false;
  c.print = false;
  c.bucket_mb = bucket_mb;
  return c;
}

std::vector<float> train(Communicator& comm, const TrainConfig& c) {
  Trainer t(comm, c);
  t.run();
  return {t.model().params(), t.model().params() + t.model().param_count()};
}

// Collective (builds a Trainer).
size_t bucket_count(Communicator& comm, const TrainConfig& c) {
  Trainer t(comm, c);
  return assign_buckets(t.model().layer_spans(), bucket_bytes_from_mb(c.bucket_mb)).size();
}

void expect_buckets_match_one_reduction(TrainConfig many, TrainConfig one) {
  auto world = make_mpi_communicator();
  const size_t buckets = bucket_count(*world, many);
  ASSERT_GE(buckets, 3u) << "the test needs several buckets";
  ASSERT_EQ(bucket_count(*world, one), 1u);
  std::vector<float> a = train(*world, many), b = train(*world, one);
  double rel = relative_difference(a, b);
  if (world->rank() == 0)
    std::printf("%d ranks, K=%d: %zu buckets vs 1 differ by %.3g (relative L2)\n", world->size(),
                many.grad_accum, buckets, rel);
  // Each element is summed over the same ranks in both cases; two ranks add two numbers, which is
  // exact to the bit. More ranks may let MPI pick another reduction order for another message
  // size, hence the tolerance.
  if (world->size() <= 2)
    EXPECT_EQ(a, b) << "bucketed and single all-reduce must give bitwise equal parameters";
  else
    EXPECT_LT(rel, 1e-6);
}

}  // namespace

TEST(BucketedReduction, ManyBucketsMatchOneAllReduce) {
  expect_buckets_match_one_reduction(config(0.002), config(0));
}

TEST(BucketedReduction, ManyBucketsMatchOneAllReduceWithGradAccum) {
  TrainConfig many = config(0.002), one = config(0);
  many.grad_accum = one.grad_accum = 2;
  many.global_batch = one.global_batch = 2 * 4 * 5;  // micro-batches divide by 1, 2 and 4 ranks
  expect_buckets_match_one_reduction(many, one);
}

TEST(BucketedReduction, Bf16WireIsCloseToFp32ButRounds) {
  auto world = make_mpi_communicator();
  TrainConfig fp32 = config(0.002), bf16 = fp32;
  bf16.grad_reduce_dtype = Precision::bf16;
  std::vector<float> a = train(*world, fp32), b = train(*world, bf16);
  double rel = relative_difference(b, a);
  if (world->rank() == 0)
    std::printf("%d ranks: bf16 vs fp32 gradient reduction differ by %.3g after 6 steps\n",
                world->size(), rel);
  EXPECT_GT(rel, 0.0) << "a bf16 reduction rounds the gradients";
  EXPECT_LT(rel, 1e-2);
}

TEST(BucketedReduction, RefusesWhatTheCpuCannotDo) {
  auto world = make_mpi_communicator();
  TrainConfig c = config(25);
  c.precision = Precision::bf16;
  try {
    Trainer t(*world, c);
    FAIL() << "bf16 compute on the CPU was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--precision bf16 needs --device cuda"), std::string::npos)
        << e.what();
  }
  c.precision = Precision::fp32;
  c.device = DeviceKind::cuda;
  // Where no GPU answers (or CUDA was not built) --device cuda is refused in words saying which.
  std::string why;
  if (cuda_device_count(&why) == 0) {
    try {
      Trainer t(*world, c);
      FAIL() << "--device cuda was accepted without a GPU (" << why << ")";
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("built without CUDA") != std::string::npos ||
                  msg.find("no CUDA device") != std::string::npos)
          << msg;
    }
  }
  c.device = DeviceKind::cpu;
  c.bucket_mb = -1;
  EXPECT_THROW(Trainer(*world, c), UsageError);
}
