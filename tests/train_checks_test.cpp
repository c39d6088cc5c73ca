// The memory check before training (train/train_checks.h): what a rank needs, times the ranks that
// share the host, against the memory the host has; and that memory, cgroups included.
#include "runtime/train/train_checks.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/base/error.h"
#include "runtime/train/train_config.h"

using namespace lockstep;

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TrainConfig small_run(int host_ranks) {
  TrainConfig c;
  c.model = "mlp:8";
  c.global_batch = 64;
  c.host_ranks = host_ranks;
  return c;
}

DatasetInfo images() {
  DatasetInfo info;
  info.path = "images.h5";
  info.rows = 1000;
  info.sample_shape = {28, 28, 1};
  info.sample_size = 784;
  info.num_classes = 10;
  return info;
}

}  // namespace

TEST(MemoryCheck, TheRanksOfAHostShareItsMemory) {
  // Each rank would hold a 1 GiB split in memory; the host has 1.5 GiB.
  EXPECT_NO_THROW(check_batch_fits(small_run(1), images(), 10, 32, kGiB, 3 * kGiB / 2));
  try {
    check_batch_fits(small_run(2), images(), 10, 32, kGiB, 3 * kGiB / 2);
    ADD_FAILURE() << "two ranks holding 1 GiB each were let onto a host with 1.5 GiB";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(std::string::npos, msg.find("for the 2 ranks on this host")) << msg;
    EXPECT_NE(std::string::npos, msg.find("--data-in-memory-mb 0")) << msg;
  }
}

TEST(MemoryCheck, UnknownMemoryRefusesNothing) {
  EXPECT_NO_THROW(check_batch_fits(small_run(8), images(), 10, 32, 64 * kGiB, 0));
}

TEST(MemoryCheck, ThisHostReportsSomeMemory) {
  const uint64_t have = available_host_memory();
  EXPECT_GT(have, uint64_t{16} << 20) << "less than 16 MiB available, or none read";
}
