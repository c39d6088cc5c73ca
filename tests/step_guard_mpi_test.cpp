// StepGuard at 1, 2 and 4 ranks: what one rank alone sees (a stop signal, a non-finite local loss)
// becomes every rank's verdict at the same step, so no rank leaves the others in a collective.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/signals.h"
#include "runtime/step_guard.h"

using namespace lockstep;

namespace {
std::vector<float> finite_grads() { return std::vector<float>(1000, 0.5f); }
}  // namespace

TEST(StepGuard, StopSignalOnOneRankStopsEveryRankAtTheSameStep) {
  auto comm = make_mpi_communicator();
  StepGuard guard(*comm, GuardOptions{});
  clear_stop_request();
  const int last = comm->size() - 1;
  std::vector<float> g = finite_grads();
  for (int step = 0; step < 3; ++step) {
    if (step == 1 && comm->rank() == last) std::raise(SIGTERM);  // handled: sets the flag
    guard.before_reduce(1.0);
    EXPECT_TRUE(guard.update_ok(g.data(), g.size(), step, 0));
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
    EXPECT_EQ(guard.update_ok(g.data(), g.size(), step, 0), step != 2) << "step " << step;
  }
  EXPECT_EQ(guard.skipped_steps(), 1);
  g[777] = INFINITY;  // a non-finite averaged gradient is skipped too
  guard.before_reduce(1.0);
  EXPECT_FALSE(guard.update_ok(g.data(), g.size(), 4, 0));
  EXPECT_EQ(guard.skipped_steps(), 2);
  EXPECT_FALSE(guard.stopped());
}

TEST(StepGuard, NonFiniteLossStopsEveryRankNamingTheStep) {
  auto comm = make_mpi_communicator();
  StepGuard guard(*comm, GuardOptions{});  // --on-nan stop
  std::vector<float> g = finite_grads();
  guard.before_reduce(comm->rank() == 0 ? INFINITY : 2.0);
  try {
    guard.update_ok(g.data(), g.size(), 41, 2);
    ADD_FAILURE() << "an infinite loss on rank 0 did not stop rank " << comm->rank();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the loss is not finite (NaN or Inf) at step 42 (epoch 3)"),
              std::string::npos) << e.what();
  }
  comm->barrier();
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
