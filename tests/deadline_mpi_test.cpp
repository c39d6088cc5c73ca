// A rank that skips a collective must not hang the others: their wait fails with a TimeoutError
// that names the collective and the rank, within the deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/base/communicator.h"
#include "runtime/base/error.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

TEST(Deadline, SkippedCollectiveTimesOutWithMessage) {
  auto comm = make_mpi_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 or more ranks: one rank must skip the collective";
  const auto deadline = std::chrono::milliseconds(1500);
  const int skipper = comm->size() - 1;
  std::vector<float> buf(100, 1.0f);
  if (comm->rank() != skipper) {
    auto start = Clock::now();
    auto work =
        comm->all_reduce_async(buf.data(), buf.data(), buf.size(), DType::f32, ReduceOp::sum);
    try {
      work->wait(deadline);
      ADD_FAILURE() << "wait returned although rank " << skipper << " never joined";
    } catch (const TimeoutError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("all_reduce"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[rank " + std::to_string(comm->rank()) + "/"), std::string::npos) << msg;
    }
    auto waited = Clock::now() - start;
    EXPECT_GE(waited, deadline);
    EXPECT_LT(waited, deadline + std::chrono::seconds(3)) << "the timeout fired late";
    EXPECT_FALSE(comm->quiet()) << "the collective given up on still runs on buf";
    // Let the late rank finish the collective so the job can shut down cleanly.
    work->wait(std::chrono::seconds(60));
    EXPECT_TRUE(comm->quiet()) << "the collective completed";
  } else {
    std::this_thread::sleep_for(deadline + std::chrono::milliseconds(1500));
    comm->all_reduce(buf.data(), buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  }
  comm->barrier();
}

// A small blocking collective runs on the calling thread (comm/mpi_inline.h), not on the progress
// thread: it keeps the same deadline and the same message, naming the collective, the rank and
// the deadline.
TEST(Deadline, SmallBlockingCollectiveTimesOutOnCallingThread) {
  auto comm = make_mpi_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 or more ranks: one rank must skip the collective";
  const auto deadline = std::chrono::milliseconds(1500);
  comm->set_timeout(deadline);
  const int skipper = comm->size() - 1;
  double value = 1.0;  // 8 bytes
  if (comm->rank() != skipper) {
    auto start = Clock::now();
    try {
      comm->all_reduce(&value, &value, 1, DType::f64, ReduceOp::sum);
      ADD_FAILURE() << "all_reduce returned although rank " << skipper << " never joined";
    } catch (const TimeoutError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("all_reduce (1 x float64, sum)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[rank " + std::to_string(comm->rank()) + "/"), std::string::npos) << msg;
      EXPECT_NE(msg.find("within 1.5 s"), std::string::npos) << msg;
    }
    auto waited = Clock::now() - start;
    EXPECT_GE(waited, deadline);
    EXPECT_LT(waited, deadline + std::chrono::seconds(3)) << "the timeout fired late";
  } else {
    std::this_thread::sleep_for(deadline + std::chrono::milliseconds(1500));
    comm->all_reduce(&value, &value, 1, DType::f64, ReduceOp::sum);
    EXPECT_EQ(value, static_cast<double>(comm->size()));
  }
  // The collective given up on is still started; the late rank completes it, and the communicator
  // goes on in order (the next collective drives the abandoned one too).
  comm->set_timeout(std::chrono::seconds(60));
  comm->barrier();
  double after = 1.0;
  comm->all_reduce(&after, &after, 1, DType::f64, ReduceOp::sum);
  EXPECT_EQ(after, static_cast<double>(comm->size()));
}

// A small collective given up on stays started inside MPI, and a late peer completes it: MPI must
// then write its own copy, not the caller's buffer, which the caller has since reused (or freed:
// a rank that fails unwinds). With rank 0 late at 4 ranks, rank 2's exchange with it is the one
// that would land in the caller's buffer.
TEST(Deadline, SmallCollectiveGivenUpOnLeavesTheCallersBufferAlone) {
  auto comm = make_mpi_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 or more ranks: one rank must be late";
  const auto deadline = std::chrono::milliseconds(1500);
  comm->set_timeout(deadline);
  const int late = 0;
  double value = 1.0;
  if (comm->rank() != late) {
    EXPECT_THROW(comm->all_reduce(&value, &value, 1, DType::f64, ReduceOp::sum), TimeoutError);
    EXPECT_FALSE(comm->quiet()) << "the exchange given up on is still started";
    value = -7.0;  // the caller's buffer, reused
  } else {
    std::this_thread::sleep_for(deadline + std::chrono::milliseconds(1500));
    comm->all_reduce(&value, &value, 1, DType::f64, ReduceOp::sum);
    EXPECT_EQ(value, static_cast<double>(comm->size())) << "the late rank's sum";
  }
  comm->set_timeout(std::chrono::seconds(60));
  comm->barrier();  // drives the exchanges the late rank completed
  if (comm->rank() != late) {
    EXPECT_EQ(-7.0, value) << "MPI wrote the buffer after the time-out";
  }
  double after = 1.0;
  comm->all_reduce(&after, &after, 1, DType::f64, ReduceOp::sum);
  EXPECT_EQ(after, static_cast<double>(comm->size()));
}
