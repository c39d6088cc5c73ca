// Start-up across ranks, with faults injected, on CPU ranks: the device choice agreed when ranks
// see different GPU counts (--device auto would leave one rank on the CPU while the others wait in
// NCCL), and NCCL's unique id broadcast over the host communicator under its deadline (a rank 0
// slow to get there fails the others with a TimeoutError instead of hanging them), its failure on
// rank 0 reaching every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST(DeviceAgreement, ARankWithoutAGpuUnderDeviceAutoIsOneAgreedError) {
  auto host = make_mpi_communicator();
  if (host->size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
  ContextOptions options;
  options.device = "auto";
  options.comm = "mpi";  // ranks may share the one (pretended) GPU
  options.timeout = std::chrono::seconds(30);
  // Rank 0 sees a GPU, the others none: each would choose alone, rank 0 a GPU, the rest the CPU.
  options.gpu_count = [rank = host->rank()](std::string* why) {
    if (rank == 0) return 1;
    *why = "test: this rank's driver does not answer";
    return 0;
  };
  const auto start = Clock::now();
  try {
    make_context(discover_world(), *host, options);
    ADD_FAILURE() << "ranks on different devices were accepted";
  } catch (const AgreedUsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(std::string::npos, msg.find("rank 1 ")) << msg;
    EXPECT_NE(std::string::npos, msg.find("test: this rank's driver does not answer")) << msg;
    EXPECT_NE(std::string::npos, msg.find("--device cpu")) << msg;
  }
  EXPECT_LT(seconds_since(start), 5.0) << "not at once: a rank waited for a peer's deadline";
}

TEST(UniqueIdBroadcast, EveryRankGetsRankZerosBytes) {
  auto host = make_mpi_communicator();
  const std::vector<unsigned char> id = broadcast_unique_id(*host, 128, [](void* out) {
    for (int i = 0; i < 128; ++i)
      static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(i * 7);
    return std::string();
  });
  ASSERT_EQ(128u, id.size());
  for (int i = 0; i < 128; ++i) EXPECT_EQ(static_cast<unsigned char>(i * 7), id[i]) << i;
}

TEST(UniqueIdBroadcast, AFailureOnRankZeroReachesEveryRank) {
  auto host = make_mpi_communicator();
  try {
    broadcast_unique_id(*host, 16, [](void*) { return std::string("test: no id today"); });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (host->rank() == 0)
      EXPECT_NE(std::string::npos, msg.find("test: no id today")) << msg;
    else
      EXPECT_NE(std::string::npos, msg.find("rank 0 could not create the NCCL unique id")) << msg;
  }
}

TEST(UniqueIdBroadcast, ARankZeroLateBeyondTheDeadlineFailsTheOthersInTime) {
  auto host = make_mpi_communicator();
  if (host->size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
  host->set_timeout(milliseconds(1000));
  const auto start = Clock::now();
  if (host->rank() == 0) {
    // Slow before the exchange (its first CUDA context, say): 2 s, twice the deadline.
    std::this_thread::sleep_for(milliseconds(2000));
    try {
      broadcast_unique_id(*host, 16, [](void*) { return std::string(); });
    } catch (const TimeoutError&) {
      // the others have given up; rank 0 may or may not complete its side
    }
  } else {
    try {
      broadcast_unique_id(*host, 16, [](void*) { return std::string(); });
      ADD_FAILURE() << "the broadcast completed without rank 0";
    } catch (const TimeoutError& e) {
      const double took = seconds_since(start);
      EXPECT_GE(took, 0.9) << e.what();
      EXPECT_LT(took, 1.9) << "the deadline was 1 s: " << e.what();
      EXPECT_NE(std::string::npos, std::string(e.what()).find("broadcast")) << e.what();
    }
  }
  // Every rank is past the late broadcast before the communicator goes.
  MPI_Barrier(MPI_COMM_WORLD);
}

// A wait on NCCL that gives up says why; at start-up ("nccl init ...") it also names the network
// interface settings and NCCL's debugging switches, where a wrong interface shows first (issue 31:
// the init timeout named no network cause).
TEST(NcclTimeoutReason, StartUpNamesTheNetworkOthersDoNot) {
  const std::string init = nccl_timeout_reason("nccl init (ncclCommInitRankConfig)");
  EXPECT_NE(std::string::npos, init.find("a peer rank has died, stalled, or never reached it"));
  for (const char* hint :
       {"NCCL_SOCKET_IFNAME", "--iface", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET"})
    EXPECT_NE(std::string::npos, init.find(hint)) << hint << " missing: " << init;
  const std::string later = nccl_timeout_reason("all_reduce (f32, 1024 elements)");
  EXPECT_NE(std::string::npos, later.find("the NCCL communicator was aborted"));
  EXPECT_EQ(std::string::npos, later.find("NCCL_SOCKET_IFNAME")) << later;
}
