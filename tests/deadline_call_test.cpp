// run_within, what the NCCL backend's abort runs under: a call that returns in time is joined and
// its effects are visible; one that does not leaves the caller at the deadline instead of
// blocking it, whatever the call does later.
#include "runtime/base/deadline_call.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace lockstep;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(RunWithin, ACallThatReturnsInTimeIsJoined) {
  int result = 0;
  EXPECT_TRUE(run_within(milliseconds(30'000), [&result] { result = 42; }));
  EXPECT_EQ(42, result) << "the call's effects are visible once it is joined";
}

TEST(RunWithin, AStuckCallLeavesTheCallerAtTheDeadline) {
  // The call blocks until released (as ncclCommAbort waiting on a peer that never comes); it owns
  // what it touches, since it outlives this scope.
  auto release = std::make_shared<std::atomic<bool>>(false);
  const auto start = Clock::now();
  EXPECT_FALSE(run_within(milliseconds(200), [release] {
    while (!release->load()) std::this_thread::sleep_for(milliseconds(5));
  }));
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, milliseconds(200));
  EXPECT_LT(waited, milliseconds(20'000)) << "the caller blocked on the stuck call";
  release->store(true);  // lets the detached thread finish before the process ends
}

TEST(RunWithin, AThrowingCallStillCountsAsReturned) {
  EXPECT_TRUE(run_within(milliseconds(30'000), [] { throw std::runtime_error("inside"); }));
}
