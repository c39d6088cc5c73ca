// The collective cases of collective_cases.h on the MPI backend with host buffers, at the world
// size mpiexec gives (ctest runs 1, 2 and 4 ranks, each as several entries: see CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "collective_cases.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

SharedCases& shared() {
  static SharedCases cases(
      [] {
        auto comm = make_mpi_communicator();
        comm->set_timeout(std::chrono::seconds(120));
        return comm;
      },
      host_buffer_ops);
  return cases;
}

class MpiTypeMatrix : public testing::TestWithParam<DType> {
 protected:
  static void TearDownTestSuite() { shared().release(); }
};

class MpiLarge : public testing::TestWithParam<LargeCase> {
 protected:
  static void TearDownTestSuite() { shared().release(); }
};

}  // namespace

TEST_P(MpiTypeMatrix, EveryOpAndSizeOnHostBuffers) {
  run_type_matrix(shared().comm(), shared().buffers(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, MpiTypeMatrix, testing::ValuesIn(all_dtypes()),
                         dtype_case_name);

TEST_P(MpiLarge, SixtyFourMiBOnHostBuffers) {
  run_large_case(shared().comm(), shared().buffers(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, MpiLarge, testing::ValuesIn(large_cases()), large_case_name);

TEST(MpiCollectives, AsyncHandlesCompleteInIssueOrder) {
  auto comm = make_mpi_communicator();
  std::vector<float> a(1000, 1.0f + comm->rank()), b(10, 2.0f);
  auto w1 = comm->all_reduce_async(a.data(), a.data(), a.size(), DType::f32, ReduceOp::sum);
  auto w2 = comm->all_reduce_async(b.data(), b.data(), b.size(), DType::f32, ReduceOp::max);
  w2->wait(std::chrono::seconds(30));
  EXPECT_TRUE(w1->done()) << "collectives must complete in the order they were issued";
  w1->wait(std::chrono::seconds(30));
  float want = 0;
  for (int r = 0; r < comm->size(); ++r) want += 1.0f + r;
  EXPECT_FLOAT_EQ(want, a[999]);
  EXPECT_FLOAT_EQ(2.0f, b[0]);
}

TEST(MpiCollectives, BroadcastRejectsRootOutsideWorld) {
  auto comm = make_mpi_communicator();
  float x = 0;
  EXPECT_THROW(comm->broadcast(&x, 1, DType::f32, comm->size()), Error);
}

// Small collectives (comm/mpi_inline.h): a blocking one issued while others are in flight waits
// for them and keeps the issue order; and one rank may take the blocking form where the others
// take the async one (every small collective uses MPI's nonblocking call, on either thread).
TEST(MpiCollectives, SmallCollectivesKeepOrderAndMixForms) {
  auto comm = make_mpi_communicator();
  const int size = comm->size(), rank = comm->rank();
  const auto limit = std::chrono::seconds(60);
  std::vector<float> big(size_t{1} << 20, 1.0f + rank);  // 4 MiB: through the progress thread
  auto big_work =
      comm->all_reduce_async(big.data(), big.data(), big.size(), DType::f32, ReduceOp::sum);
  int64_t most = rank;
  auto small_work = comm->all_reduce_async(&most, &most, 1, DType::i64, ReduceOp::max);
  double total = rank + 1.0;
  comm->all_reduce(&total, &total, 1, DType::f64, ReduceOp::sum);
  big_work->wait(limit);
  small_work->wait(limit);
  float want_big = 0;
  for (int r = 0; r < size; ++r) want_big += 1.0f + r;
  EXPECT_FLOAT_EQ(want_big, big.back());
  EXPECT_EQ(size - 1, most);
  EXPECT_DOUBLE_EQ(size * (size + 1) / 2.0, total);

  float top = 2.0f * rank;
  if (rank == 0)
    comm->all_reduce(&top, &top, 1, DType::f32, ReduceOp::max);
  else
    comm->all_reduce_async(&top, &top, 1, DType::f32, ReduceOp::max)->wait(limit);
  EXPECT_FLOAT_EQ(2.0f * (size - 1), top);
  int32_t word = rank == size - 1 ? 42 : 0;
  if (rank % 2 == 0)
    comm->broadcast(&word, 1, DType::i32, size - 1);
  else
    comm->broadcast_async(&word, 1, DType::i32, size - 1)->wait(limit);
  EXPECT_EQ(42, word);
  if (rank == 0)
    comm->barrier();
  else
    comm->barrier_async()->wait(limit);
}

// The small all_reduce is an exchange of our own (comm/mpi_inline.h): every rank must end with the
// same bits, also where the order of operands matters (max with a NaN on one rank), so that
// replicas stay identical.
TEST(MpiCollectives, SmallAllReduceGivesEveryRankTheSameBits) {
  auto comm = make_mpi_communicator();
  const int rank = comm->rank();
  std::vector<float> sums(7), tops(7);
  for (size_t i = 0; i < sums.size(); ++i) {
    sums[i] = 1.0f / static_cast<float>(3 + rank + 7 * i);
    tops[i] = static_cast<float>(rank) + 0.5f * i;
  }
  if (rank == 0) tops[3] = std::numeric_limits<float>::quiet_NaN();
  comm->all_reduce(sums.data(), sums.data(), sums.size(), DType::f32, ReduceOp::sum);
  comm->all_reduce(tops.data(), tops.data(), tops.size(), DType::f32, ReduceOp::max);
  std::vector<float> sums0 = sums, tops0 = tops;
  comm->broadcast(sums0.data(), sums0.size(), DType::f32, 0);
  comm->broadcast(tops0.data(), tops0.size(), DType::f32, 0);
  EXPECT_EQ(0, std::memcmp(sums0.data(), sums.data(), sums.size() * sizeof(float)))
      << "rank " << rank << "'s sum differs from rank 0's";
  EXPECT_EQ(0, std::memcmp(tops0.data(), tops.data(), tops.size() * sizeof(float)))
      << "rank " << rank << "'s max differs from rank 0's";
}
