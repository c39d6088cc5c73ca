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
    auto work = comm->all_reduce_async(buf.data(), buf.data(), buf.size(), DType::f32, ReduceOp::sum);
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
    // Let the late rank finish the collective so the job can shut down cleanly.
    work->wait(std::chrono::seconds(60));
  } else {
    std::this_thread::sleep_for(deadline + std::chrono::milliseconds(1500));
    comm->all_reduce(buf.data(), buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  }
  comm->barrier();
}
