// Data-parallel exactness (DESIGN.md decision 5): training at the world size mpiexec gives (1, 2,
// 4) ends with the parameters that one rank alone reaches with the same global batch and seed, for
// the CNN, the MLP and the GPT language model (AdamW with decay on matrices, warm-up and cosine
// schedule, clipping), a masked partial batch at each epoch's end included; gradient accumulation
// over K micro-batches equals one batch K times larger; replica checks and bad batch sizes behave.
// Rank 0 computes the one-rank reference on a world-of-one communicator while the others wait.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <random>

#include "data_fixtures.h"
#include "runtime/base/error.h"
#include "runtime/comm/recording_communicator.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"
#include "runtime/process/signals.h"
#include "runtime/train/trainer.h"
#include "solo_communicator.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using lockstep::testing_util::bf16_rounding;
using lockstep::testing_util::Bf16Rounding;
using lockstep::testing_util::params_by_tensor;
using lockstep::testing_util::relative_difference;
using lockstep::testing_util::SoloCommunicator;

namespace {

// 150 training images (28, 28, 1) uint8 in 10 classes whose mean brightness differs by class, so
// training moves the parameters somewhere definite; 40 test images. 150 is not a multiple of the
// batch sizes used below, so every epoch ends with a masked partial batch.
const std::string& data_file() {
  static const std::string path = [] {
    const std::string path = testing_util::shared_temp_dir("trainer") + "/images.h5";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      testing_util::StripedImages s;
      s.side = 28, s.classes = 10, s.train_rows = 150, s.test_rows = 40, s.seed = 7;
      s.noise = 128, s.stripe = 12, s.norm_attributes = true;
      testing_util::write_striped_images(path, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
  }();
  return path;
}

// Equal "up to summation order" has a catch with ReLU and max-pool: a pre-activation within
// rounding of zero, or two pooled values within rounding of each other, can go either way, and
// the step then differs by one position's whole gradient (1e-5 to 4e-4 after these 20 steps).
// Such a flip is not rare at 6 ranks (batches of 4 a rank): of seeds 11-18 the CNN flipped with 5
// when the loss took libm's expf and with 3 once it took the vectorised exp (seed 11 among them,
// 2026-12-01), whatever the world size otherwise. Seed 18 flips at none of 1, 2, 4 and 6 ranks,
// on AVX-512 and capped to AVX2; without a flip the runs agree to ~1e-7.
TrainConfig base_config(const std::string& model, OptimizerKind opt, int64_t batch, int64_t steps) {
  TrainConfig c;
  c.train.path = data_file();
  c.model = model;
  c.optimizer.kind = opt;
  c.lr = opt == OptimizerKind::momentum ? 0.01 : 1e-3;
  c.global_batch = batch;
  c.steps = steps;
  c.seed = 18;
  c.log_every = 5;
  c.check_every = 7;
  c.eval_every_epoch = false;
  c.print = false;
  return c;
}

std::vector<float> train(Communicator& comm, const TrainConfig& c, TrainResult* result = nullptr) {
  Trainer t(comm, c);
  TrainResult r = t.run();
  if (result) *result = r;
  return {t.model().params(), t.model().params() + t.model().param_count()};
}

// Trains at the world's size and alone (every rank trains the one-rank reference on its own, so
// any collective the trainer makes on MPI_COMM_WORLD is still matched); both must end at the same
// parameters, and the parameters must have moved (a run that did nothing would match trivially).
void expect_world_matches_one_rank(const TrainConfig& c) {
  auto world = make_mpi_communicator();
  std::vector<float> init;
  {
    TrainConfig zero = c;
    zero.steps = 0;
    zero.epochs = 1;
    Trainer t(*world, zero);
    t.init_params();
    init.assign(t.model().params(), t.model().params() + t.model().param_count());
  }
  TrainResult parallel, alone;
  std::vector<float> p = train(*world, c, &parallel);
  SoloCommunicator solo;
  std::vector<float> ref = train(solo, c, &alone);
  EXPECT_EQ(c.steps, parallel.times.steps);
  double rel = relative_difference(p, ref);
  if (world->rank() == 0)
    std::printf("%s, %lld steps: parameters at %d ranks vs 1 differ by %.2g (relative L2)\n",
                c.model.c_str(), static_cast<long long>(c.steps), world->size(), rel);
  EXPECT_LT(rel, 1e-5) << c.model << " at " << world->size() << " ranks vs 1";
  EXPECT_GT(relative_difference(init, ref), 1e-3) << "training did not move the parameters";
  EXPECT_NEAR(alone.test.loss, parallel.test.loss, 1e-4 * std::fabs(alone.test.loss));
  EXPECT_EQ(alone.test.samples, parallel.test.samples);
}

bool world_rank_is_zero() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0;
}

}  // namespace

TEST(TrainerEquivalence, CnnAtWorldSizeMatchesOneRank) {
  // 150 rows at batch 24 (which 1, 2, 3, 4 and 6 ranks divide): 7 steps an epoch, the last of 6
  // rows; 20 steps cross two of them.
  expect_world_matches_one_rank(base_config("cnn", OptimizerKind::momentum, 24, 20));
}

TEST(TrainerEquivalence, MlpAtWorldSizeMatchesOneRank) {
  expect_world_matches_one_rank(base_config("mlp:256,128", OptimizerKind::adam, 24, 20));
}

TEST(TrainerEquivalence, GptAtWorldSizeMatchesOneRank) {
  // 90 sequences of 16 byte tokens (a fixed next-token rule, so training moves somewhere
  // definite) at global batch 12: 8 steps an epoch, the last of 6 rows; 20 steps cross it.
  static const std::string path = [] {
    const std::string p = testing_util::shared_temp_dir("trainer") + "/tokens.h5";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      testing_util::write_tokens<uint8_t>(p, 90, 16, 256, "train");
      testing_util::write_tokens<uint8_t>(p, 12, 16, 256, "test");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return p;
  }();
  TrainConfig c = base_config("gpt:layers=2,heads=2,dim=16,ctx=16", OptimizerKind::adamw, 12, 20);
  c.train.path = path;
  c.optimizer.weight_decay = 0.1f;
  c.optimizer.beta2 = 0.95f;
  c.lr = 3e-3;
  c.lr_schedule = LrScheduleKind::cosine;
  c.warmup_steps = 5;
  c.clip_norm = 1.0;
  expect_world_matches_one_rank(c);
}

TEST(TrainerEquivalence, GradAccumEqualsOneLargeBatch) {
  auto world = make_mpi_communicator();
  // 24 rows per update: 7 steps an epoch, the last of 6 rows (micro-batches of 6 and none).
  TrainConfig whole = base_config("cnn", OptimizerKind::momentum, 24, 10);
  TrainConfig accum = whole;
  accum.grad_accum = 2;
  std::vector<float> a = train(*world, whole);
  std::vector<float> b = train(*world, accum);
  double rel = relative_difference(b, a);
  if (world->rank() == 0)
    std::printf("cnn, 10 steps: K = 2 micro-batches vs one batch of 24 differ by %.2g\n", rel);
  EXPECT_LT(rel, 1e-5);
}

// --eval-every: evaluations between steps (the test split's loader, the model's forward buffers)
// leave the training exactly as it was, and the last one is the run's final score.
TEST(TrainerEquivalence, EvaluatingBetweenStepsChangesNothingOfTheTraining) {
  auto world = make_mpi_communicator();
  TrainConfig plain = base_config("cnn", OptimizerKind::adam, 24, 10);
  plain.eval_every_epoch = true;
  TrainConfig every = plain;
  every.eval_every = 3;
  TrainResult a, b;
  const std::vector<float> want = train(*world, plain, &a);
  const std::vector<float> got = train(*world, every, &b);
  EXPECT_EQ(0u, testing_util::differing(got, want)) << "of " << want.size() << " parameters";
  EXPECT_EQ(b.test.loss, a.test.loss);
  EXPECT_EQ(b.test.accuracy, a.test.accuracy);
}

// --eval-steps N: an evaluation reads the test split's first N batches only (40 rows: one batch of
// 24, then all of it).
TEST(TrainerEquivalence, EvalStepsReadsTheFirstBatchesOfTheTestSplit) {
  auto world = make_mpi_communicator();
  TrainConfig c = base_config("mlp:32", OptimizerKind::adam, 24, 4);
  for (int64_t steps : {1, 2, 0}) {
    c.eval_steps = steps;
    TrainResult r;
    train(*world, c, &r);
    EXPECT_EQ(steps == 1 ? 24 : 40, r.test.samples) << "--eval-steps " << steps;
  }
}

TEST(TrainerEquivalence, ReplicasAgreeAndEveryRankSeesTheSameTestScore) {
  auto world = make_mpi_communicator();
  TrainConfig c = base_config("mlp:32", OptimizerKind::adam, 24, 4);
  Trainer t(*world, c);
  TrainResult r = t.run();
  EXPECT_NO_THROW(t.verify_replicas("after the run"));
  double score[2] = {r.test.loss, r.test.accuracy};
  double max[2] = {score[0], score[1]};
  world->all_reduce_inplace(max, 2, ReduceOp::max);
  EXPECT_EQ(max[0], score[0]);
  EXPECT_EQ(max[1], score[1]);
  EXPECT_EQ(40, r.test.samples);
}

TEST(TrainerEquivalence, DivergedReplicaIsNamed) {
  auto world = make_mpi_communicator();
  if (world->size() < 2) GTEST_SKIP() << "needs two ranks";
  Trainer t(*world, base_config("mlp:32", OptimizerKind::adam, 24, 4));
  t.init_params();
  if (world->rank() == world->size() - 1) t.model().params()[0] += 1.0f;
  try {
    t.verify_replicas("in the test");
    ADD_FAILURE() << "a changed parameter went unnoticed";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(std::string::npos, m.find("rank(s) " + std::to_string(world->size() - 1))) << m;
  }
}

TEST(TrainerEquivalence, BadBatchIsRefusedOnEveryRank) {
  auto world = make_mpi_communicator();
  if (world->size() < 2) GTEST_SKIP() << "every batch divides by one rank";
  TrainConfig c = base_config("cnn", OptimizerKind::adam, 16 * world->size() + 1, 2);
  try {
    Trainer t(*world, c);
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string::npos, std::string(e.what()).find("--global-batch")) << e.what();
  }
}

class CollectiveSequence : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveSequence, EveryRankIssuesTheSameCollectivesWhateverHappensOnOne) {
  // Everything that happens to one rank alone must turn into the same collectives on every rank:
  // a masked partial batch at each epoch's end, a loss that is not finite on the last rank only
  // (skipped, --on-nan skip), checkpoints, evaluations, and a stop signal raised on the last rank
  // alone. Every collective goes through a recorder; the sequences are compared after every
  // step and at the end, over a communicator of their own.
  auto world = make_mpi_communicator();
  auto checker = make_mpi_communicator();
  RecordingCommunicator recorded(*world);
  const int P = world->size(), last = P - 1;
  TrainConfig c = base_config("cnn", OptimizerKind::adam, 8 * P, 40);
  c.eval_every_epoch = true;  // 150 rows: an epoch of whole batches and a masked partial one
  c.check_every = 3;
  c.bucket_mb = 0.02;  // several buckets: stage 2's ring takes turns
  c.guard.on_nan = NanPolicy::skip;
  c.guard.checkpoint_every = 4;
  c.guard.checkpoint_dir = testing_util::shared_temp_dir("trainer-sequence") + "/ck";
  c.guard.existing = ExistingCheckpoints::replace;
  c.zero = GetParam();  // --zero 1, 2: reduce-scatters, a norm over shards, all-gathers
  setenv("LOCKSTEP_TEST_LOSS_INF", (std::to_string(last) + ":5").c_str(), 1);
  Trainer t(recorded, c);
  unsetenv("LOCKSTEP_TEST_LOSS_INF");
  int64_t steps = 0;
  t.set_phase_hook([&](Phase p, double, double) {
    if (p != Phase::optimizer) return;
    steps += 1;
    if (steps == 27 && world->rank() == last) request_stop(SIGUSR1);
    recorded.verify(*checker, "after step " + std::to_string(steps));
  });
  clear_stop_request();
  t.run();
  clear_stop_request();
  EXPECT_EQ(1, t.guard().skipped_steps()) << "step 5's loss was not finite on rank " << last;
  EXPECT_TRUE(t.guard().stopped_early()) << "the stop signal on rank " << last << " was missed";
  EXPECT_GT(recorded.calls(), 3 * steps)
      << "the loss sums, the guard's flags and the gradients, each step";
  EXPECT_NO_THROW(recorded.verify(*checker, "at the end"));
  if (world->rank() == 0)
    std::printf("--zero %d: %lld collectives in the same order on %d rank(s) over %lld steps\n",
                GetParam(), static_cast<long long>(recorded.calls()), P,
                static_cast<long long>(steps));
}
INSTANTIATE_TEST_SUITE_P(Zero, CollectiveSequence, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "zero" + std::to_string(i.param);
                         });

TEST(CollectiveSequenceCheck, ASequenceThatDiffersIsNamed) {
  auto world = make_mpi_communicator();
  if (world->size() < 2) GTEST_SKIP() << "needs two ranks";
  auto checker = make_mpi_communicator();
  RecordingCommunicator recorded(*world);
  const int last = world->size() - 1;
  // The same count and type everywhere, so that the collective itself completes (the small
  // all_reduce is point-to-point messages), but the last rank asks for max where the others sum.
  int32_t v = 1;
  recorded.all_reduce(&v, &v, 1, DType::i32, world->rank() == last ? ReduceOp::max : ReduceOp::sum);
  try {
    recorded.verify(*checker, "in the test");
    ADD_FAILURE() << "different reduce ops were not noticed";
  } catch (const Error& e) {
    const std::string named = "rank " + std::to_string(last) + " issued 1 collective(s)";
    EXPECT_NE(std::string::npos, std::string(e.what()).find(named)) << e.what();
  }
}

// --zero 1 and --zero 2 (DESIGN.md decision 19) against --zero 0 at the world's size: the
// reduce-scatter sums each element over the same ranks as the all-reduce, but the MPI library (or
// NCCL) may order that sum differently, the gradient's norm is a sum of per-rank sums of squares
// instead of one sum, and stage 2 with accumulation sums each micro-batch over the ranks before
// summing the micro-batches. So they differ as two world sizes do: by the rounding of a summation
// order, grown by the training that follows. The bound: with momentum, 1e-5 relative L2 after 50
// steps (as the world sizes agree with one rank); with Adam, whose normalisation turns a
// rounding-size change of a near-zero gradient into a step of the learning rate's size (and the
// CNN's ReLU and max-pool decisions then branch), the difference that changing the world size
// makes at --zero 0 sets the scale: at most 4 times the difference between this world size and one
// rank, or 1e-4. A loss that is not finite on one rank is skipped by all alike. Each rank keeps
// 1/P of the optimizer state (both stages), and at stage 2 1/P of the reduced gradient plus the
// staging of two buckets (and the tied embedding's region) in place of a whole gradient buffer.
void expect_zero_matches_unsharded(TrainConfig c) {
  auto world = make_mpi_communicator();
  const int P = world->size();
  // Three trainings and a yardstick per test: at 6 ranks on a 2-core machine that alone took
  // four minutes. The issue's sizes are 2, 3 and 4 (3 for a world that is not a power of two);
  // the collective sequence above runs every stage at 6.
  if (P > 4) GTEST_SKIP() << "ZeRO's equivalence runs at 1-4 ranks, not " << P;
  // A loss that is not finite on the last rank at step 7: all skip exactly that step.
  setenv("LOCKSTEP_TEST_LOSS_INF", (std::to_string(P - 1) + ":7").c_str(), 1);
  c.guard.on_nan = NanPolicy::skip;
  c.bucket_mb = 0.02;  // several buckets of a few thousand floats: stage 2's ring takes turns
  c.zero = 0;
  Trainer unsharded(*world, c);
  unsharded.run();
  std::unique_ptr<Trainer> sharded[2];
  for (int stage = 1; stage <= 2; ++stage) {
    c.zero = stage;
    sharded[stage - 1] = std::make_unique<Trainer>(*world, c);
    sharded[stage - 1]->run();
  }
  unsetenv("LOCKSTEP_TEST_LOSS_INF");
  double bound = 1e-5;
  if (c.optimizer.kind == OptimizerKind::adam || c.optimizer.kind == OptimizerKind::adamw) {
    // The yardstick: the same run on one rank (a world of one, every rank alone), unsharded.
    SoloCommunicator solo;
    c.zero = 0;
    setenv("LOCKSTEP_TEST_LOSS_INF", "0:7", 1);  // the same step skipped
    Trainer alone(solo, c);
    unsetenv("LOCKSTEP_TEST_LOSS_INF");
    alone.run();
    bound = std::max(4 * relative_difference(params_by_tensor(unsharded), params_by_tensor(alone)),
                     1e-4);
  }
  EXPECT_EQ(1, unsharded.guard().skipped_steps());
  const Trainer::MemoryUse whole = unsharded.memory_use();
  for (int stage = 1; stage <= 2; ++stage) {
    Trainer& t = *sharded[stage - 1];
    const double rel = relative_difference(params_by_tensor(t), params_by_tensor(unsharded));
    const Trainer::MemoryUse mine = t.memory_use();
    if (world->rank() == 0)
      std::printf(
          "%s %s, %lld steps at %d rank(s), grad-accum %d: --zero %d vs --zero 0 differ by %.2g "
          "(relative L2, bound %.2g); per rank optimizer state %llu vs %llu bytes, gradients "
          "%llu vs %llu\n",
          c.model.c_str(), optimizer_name(c.optimizer.kind), static_cast<long long>(c.steps), P,
          c.grad_accum, stage, rel, bound, static_cast<unsigned long long>(mine.state),
          static_cast<unsigned long long>(whole.state), static_cast<unsigned long long>(mine.grads),
          static_cast<unsigned long long>(whole.grads));
    EXPECT_LE(rel, bound) << "--zero " << stage;
    EXPECT_EQ(1, t.guard().skipped_steps()) << "--zero " << stage;
    EXPECT_LE(mine.state * static_cast<uint64_t>(P),
              whole.state + static_cast<uint64_t>(P) * 64 * 1024)
        << "--zero " << stage << ": each rank keeps about 1/P of the optimizer state";
    if (stage == 1) {
      EXPECT_EQ(mine.grads, mine.params) << "stage 1 keeps the whole gradient";
    }
  }
  // Stage 2: this rank's 1/P of the sums, and at most a whole (padded) buffer of staging besides:
  // two buckets of the ring, or all of it where the largest bucket is half of it.
  const Trainer::MemoryUse two = sharded[1]->memory_use();
  EXPECT_GE(two.grads, two.params / static_cast<uint64_t>(P));
  EXPECT_LE(two.grads, two.params + two.params / static_cast<uint64_t>(P));
}

// A gpt: model with AdamW, global batch 12, on `train_rows` (and 12 test) random byte sequences of
// 16 tokens that rank 0 writes to a file named after `name`.
TrainConfig gpt_on_random_bytes(const std::string& spec, int64_t steps, int train_rows,
                                const std::string& name) {
  TrainConfig c = base_config(spec, OptimizerKind::adamw, 12, steps);
  c.train.path = testing_util::shared_temp_dir("trainer") + "/" + name + "_tokens.h5";
  if (world_rank_is_zero()) {
    testing_util::write_tokens<uint8_t>(c.train.path, train_rows, 16, 256, "train");
    testing_util::write_tokens<uint8_t>(c.train.path, 12, 16, 256, "test");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return c;
}

// Where no layer dominates, --zero 2 keeps less of the gradients than a whole buffer: each rank
// its 1/P of the sums and a ring of two buckets (the tied embedding's apart). Eight blocks of a
// small GPT, buckets of one block.
TEST(Zero, StageTwoKeepsLessThanAWholeGradient) {
  auto world = make_mpi_communicator();
  const int P = world->size();
  TrainConfig c = gpt_on_random_bytes("gpt:layers=8,heads=2,dim=64,ctx=16", 1, 24, "zero_memory");
  c.bucket_mb = 0.2;
  c.zero = 2;
  Trainer t(*world, c);
  const Trainer::MemoryUse m = t.memory_use();
  const double share = static_cast<double>(m.grads) / static_cast<double>(m.params);
  if (world->rank() == 0)
    std::printf("--zero 2 at %d rank(s): gradients %llu bytes per rank, %.2f of the parameters\n",
                P, static_cast<unsigned long long>(m.grads), share);
  // 1/P of the sums, two of the eight blocks and the embedding (a sixth of a block).
  EXPECT_LE(share, 1.0 / P + 0.3);
  if (P > 1) {
    EXPECT_LT(share, 0.85) << "no saving at " << P << " ranks";
  }
  t.run();  // and it trains
  EXPECT_EQ(1, t.state().global_step);
}

TEST(Zero, CnnMomentumWithClippingMatchesUnsharded) {
  TrainConfig c = base_config("cnn", OptimizerKind::momentum, 24, 50);
  c.lr = 0.005;  // slow enough that no ReLU or max-pool tie flips in 50 steps at 1-6 ranks
  c.clip_norm = 0.5;
  expect_zero_matches_unsharded(c);
}

// Accumulation: stages 0 and 1 reduce once per step; stage 2 reduce-scatters every micro-batch
// into this rank's blocks.
TEST(Zero, CnnMomentumAccumulatingMatchesUnsharded) {
  TrainConfig c = base_config("cnn", OptimizerKind::momentum, 24, 30);
  c.lr = 0.005;
  c.clip_norm = 0.5;
  c.grad_accum = 2;
  expect_zero_matches_unsharded(c);
}

TEST(Zero, CnnAdamWithClippingMatchesUnsharded) {
  TrainConfig c = base_config("cnn", OptimizerKind::adam, 24, 50);
  c.lr = 3e-4;
  c.clip_norm = 0.5;
  expect_zero_matches_unsharded(c);
}

TEST(Zero, GptAdamWWithClippingMatchesUnsharded) {
  TrainConfig c = gpt_on_random_bytes("gpt:layers=2,heads=2,dim=16,ctx=16", 50, 90, "zero");
  c.optimizer.weight_decay = 0.1f;
  c.lr = 3e-3;
  c.clip_norm = 1.0;
  expect_zero_matches_unsharded(c);
}

// --gather-dtype bf16: each rank keeps the fp32 master weights of its blocks and the all-gather
// sends them as bf16, so every rank computes with the masters rounded to bf16. What a user relies
// on: the replicas hold the same parameters, each exactly a bf16 value and exactly the rounding of
// the saved masters (which are fp32, not rounded); a step skipped for a non-finite loss on one rank
// is skipped by all; and the training stays near the fp32 run's (rounding the weights perturbs
// each forward pass by about 2^-9 relative, so the bound is a share of how far the fp32 run moved
// the parameters, not a rounding bound). The per-rank memory names the masters and the bf16 copy.
TEST(Zero, Bf16GatherKeepsFp32MastersAndComputesWithTheirRounding) {
  auto world = make_mpi_communicator();
  const int P = world->size();
  TrainConfig c = gpt_on_random_bytes("gpt:layers=2,heads=2,dim=16,ctx=16", 30, 90, "zero_bf16");
  c.optimizer.weight_decay = 0.1f;
  c.lr = 3e-3;
  c.clip_norm = 1.0;
  c.bucket_mb = 0.02;
  c.guard.on_nan = NanPolicy::skip;
  std::vector<float> init;
  {
    Trainer t(*world, c);
    t.init_params();
    init = params_by_tensor(t);
  }
  setenv("LOCKSTEP_TEST_LOSS_INF", (std::to_string(P - 1) + ":7").c_str(), 1);
  Trainer fp32(*world, c);
  fp32.run();
  auto in_tensor_order = [](Trainer& t, const std::vector<float>& flat) {
    std::vector<float> out;
    for (const ParamTensorInfo& p : t.model().param_tensors())
      out.insert(out.end(), flat.begin() + static_cast<ptrdiff_t>(p.offset),
                 flat.begin() + static_cast<ptrdiff_t>(p.offset + p.count));
    return out;
  };
  for (int stage = 1; stage <= 2; ++stage) {
    SCOPED_TRACE("--zero " + std::to_string(stage));
    c.zero = stage;
    c.gather_dtype = GatherDtype::bf16;
    Trainer t(*world, c);
    t.run();
    EXPECT_EQ(1, t.guard().skipped_steps());
    const std::vector<float> used = params_by_tensor(t);
    const std::vector<float> masters = in_tensor_order(t, t.params_to_save());
    const Bf16Rounding r = bf16_rounding(used, masters);
    EXPECT_EQ(0u, r.not_rounding) << "parameters that are not the bf16 rounding of their masters";
    EXPECT_GT(r.unrounded_masters, masters.size() / 2) << "the saved masters look rounded to bf16";
    // The same parameters on every rank: rank 0's, broadcast, against this rank's.
    std::vector<float> rank0 = used;
    world->broadcast(rank0.data(), rank0.size(), DType::f32, 0);
    EXPECT_EQ(0, std::memcmp(rank0.data(), used.data(), used.size() * sizeof(float)));
    const double moved = relative_difference(params_by_tensor(fp32), init);
    const double rel = relative_difference(masters, params_by_tensor(fp32));
    const Trainer::MemoryUse mem = t.memory_use();
    if (world->rank() == 0)
      std::printf(
          "--zero %d --gather-dtype bf16 at %d rank(s), 30 steps: masters vs the fp32 run "
          "%.2g relative L2 (the fp32 run moved %.2g); masters and bf16 copy %llu bytes "
          "per rank\n",
          stage, P, rel, moved, static_cast<unsigned long long>(mem.masters));
    EXPECT_LT(rel, 0.1 * moved);
    EXPECT_EQ(mem.masters, t.memory_use().state / 2 + t.model().param_count() * sizeof(uint16_t))
        << "AdamW's two state buffers and the masters are each this rank's share";
    EXPECT_NE(std::string::npos, t.memory_text().find("master weights"));
  }
  unsetenv("LOCKSTEP_TEST_LOSS_INF");
}
