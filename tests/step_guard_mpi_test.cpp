// StepGuard at 1, 2 and 4 ranks: what one rank alone sees (a stop signal, a non-finite local loss)
// becomes every rank's verdict at the same step, so no rank leaves the others in a collective. A
// stop before the last step is an early stop (lockstep-train exits 75); one agreed on the last
// step is not: the run completes, with its final evaluation.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/process/signals.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/host_step.h"
#include "runtime/train/step_guard.h"
#include "runtime/train/trainer.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;

namespace {
std::vector<float> finite_grads() { return std::vector<float>(1000, 0.5f); }

// Trains `steps` steps of a small image set over the whole world, with checkpoints in `dir`; the
// last rank raises SIGUSR1 at the end of step `signal_after` (seen by every rank at the next).
TrainResult train_with_signal(Communicator& comm, const std::string& dir, int64_t steps,
                              int64_t signal_after, TrainState* end, bool* early) {
  std::string data = dir + "/images.h5";
  if (comm.rank() == 0) testing_util::write_striped_images(data, {});
  comm.barrier();
  TrainConfig c;
  c.train.path = data;
  c.model = "mlp:8";
  c.global_batch = 16;  // 64 rows: 4 steps per epoch
  c.steps = steps;
  c.print = false;
  c.guard.checkpoint_dir = dir + "/ck";
  Trainer t(comm, c);
  int64_t done = 0;
  t.set_phase_hook([&](Phase p, double, double) {
    if (p == Phase::optimizer && ++done == signal_after && comm.rank() == comm.size() - 1)
      request_stop(SIGUSR1);
  });
  clear_stop_request();
  TrainResult r = t.run();
  clear_stop_request();
  EXPECT_TRUE(t.guard().stopped());
  EXPECT_EQ(t.guard().stop_signal(), SIGUSR1);
  *end = t.state();
  *early = t.guard().stopped_early();
  return r;
}
}  // namespace

TEST(StepGuard, StopBeforeTheLastStepIsAnEarlyStop) {
  auto comm = make_mpi_communicator();
  const std::string dir = testing_util::shared_temp_dir("guard-early");
  TrainState end;
  bool early = false;
  TrainResult r = train_with_signal(*comm, dir, 6, 3, &end, &early);
  EXPECT_TRUE(early);
  EXPECT_EQ(end.global_step, 4);  // the signal of step 3 is agreed at step 4
  EXPECT_EQ(r.test.samples, 0) << "a run stopped early has no final evaluation";
  EXPECT_TRUE(std::filesystem::exists(checkpoint_file_name(dir + "/ck", 4)));
}

TEST(StepGuard, StopOnTheLastStepCompletesTheRun) {
  auto comm = make_mpi_communicator();
  const std::string dir = testing_util::shared_temp_dir("guard-last");
  TrainState end;
  bool early = true;
  TrainResult r = train_with_signal(*comm, dir, 6, 5, &end, &early);
  EXPECT_FALSE(early);
  EXPECT_EQ(end.global_step, 6);
  EXPECT_EQ(r.test.samples, 16) << "the completed run skipped its final evaluation";
  EXPECT_TRUE(std::filesystem::exists(checkpoint_file_name(dir + "/ck", 6)));
}

TEST(StepGuard, StopSignalOnOneRankStopsEveryRankAtTheSameStep) {
  auto comm = make_mpi_communicator();
  StepGuard guard(*comm, GuardOptions{});
  clear_stop_request();
  const int last = comm->size() - 1;
  std::vector<float> g = finite_grads();
  for (int step = 0; step < 3; ++step) {
    if (step == 1 && comm->rank() == last) std::raise(SIGTERM);  // handled: sets the flag
    guard.before_reduce(1.0);
    EXPECT_EQ(guard.check_update(all_finite(g.data(), g.size()), step, 0), Verdict::proceed);
    EXPECT_EQ(guard.stopped(), step >= 1) << "step " << step;
  }
  EXPECT_EQ(guard.stop_signal(), SIGTERM);
  clear_stop_request();
}

TEST(StepGuard, NonFiniteLossOnOneRankIsSkippedEverywhere) {
  auto comm = make_mpi_communicator();
  GuardOptions o;
  o.on_nan = NanPolicy::skip;
  StepGuard guard(*comm, o);
  std::vector<float> g = finite_grads();
  for (int step = 0; step < 4; ++step) {
    const bool poisoned = step == 2 && comm->rank() == comm->size() / 2;
    guard.before_reduce(poisoned ? std::nan("") : 1.0);
    EXPECT_EQ(guard.check_update(all_finite(g.data(), g.size()), step, 0),
              step != 2 ? Verdict::proceed : Verdict::skip)
        << "step " << step;
  }
  EXPECT_EQ(guard.skipped_steps(), 1);
  g[777] = INFINITY;  // a non-finite averaged gradient is skipped too
  guard.before_reduce(1.0);
  EXPECT_EQ(guard.check_update(all_finite(g.data(), g.size()), 4, 0), Verdict::skip);
  EXPECT_EQ(guard.skipped_steps(), 2);
  EXPECT_FALSE(guard.stopped());
}

TEST(StepGuard, NonFiniteLossStopsEveryRankNamingTheStep) {
  auto comm = make_mpi_communicator();
  StepGuard guard(*comm, GuardOptions{});  // --on-nan stop
  std::vector<float> g = finite_grads();
  guard.before_reduce(comm->rank() == 0 ? INFINITY : 2.0);
  try {
    guard.check_update(all_finite(g.data(), g.size()), 41, 2);
    ADD_FAILURE() << "an infinite loss on rank 0 did not stop rank " << comm->rank();
  } catch (const UsageError& e) {
    EXPECT_NE(
        std::string(e.what()).find("the loss is not finite (NaN or Inf) at step 42 (epoch 3)"),
        std::string::npos)
        << e.what();
  }
  comm->barrier();
}

TEST(StepGuard, VerdictsSaveOnTheCheckpointCadenceAndOnceAtTheEnd) {
  auto comm = make_mpi_communicator();
  clear_stop_request();
  GuardOptions o;
  o.checkpoint_dir = "unused";  // the guard decides; it never writes
  o.checkpoint_every = 3;
  StepGuard guard(*comm, o);
  for (int64_t step = 1; step <= 6; ++step) {
    const Verdict v = guard.after_step(step, 10);
    EXPECT_EQ(v, step % 3 == 0 ? Verdict::save : Verdict::proceed) << "step " << step;
    if (v == Verdict::save) guard.saved(step, "ck-" + std::to_string(step));
  }
  EXPECT_EQ(guard.last_checkpoint(), "ck-6");
  EXPECT_EQ(guard.at_end(6), Verdict::proceed) << "step 6 is saved already";
  EXPECT_EQ(guard.at_end(7), Verdict::save);
  StepGuard without_dir(*comm, GuardOptions{});
  EXPECT_EQ(without_dir.after_step(3, 10), Verdict::proceed);
  EXPECT_EQ(without_dir.at_end(10), Verdict::proceed);
}

TEST(StepGuard, OptionsAreChecked) {
  EXPECT_EQ(parse_nan_policy("skip"), NanPolicy::skip);
  EXPECT_THROW(parse_nan_policy("ignore"), UsageError);
  GuardOptions o;
  o.checkpoint_every = 10;
  EXPECT_THROW(validate(o), UsageError);  // every N steps, but where?
  o.checkpoint_dir = "ck";
  EXPECT_NO_THROW(validate(o));
  o.keep_checkpoints = -1;
  EXPECT_THROW(validate(o), UsageError);
}
