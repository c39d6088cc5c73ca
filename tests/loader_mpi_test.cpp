// The sharded loader across real ranks (ctest runs this at 1, 2 and 4): over one epoch the ranks
// together use every row exactly once (the partial last batch included), the global batches are
// the slices of ShardedLoader::permutation whatever the world size, each rank reads about 1/P of
// the bytes, and a bad input on one rank makes every rank leave with the same message.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>

#include "data_fixtures.h"
#include "runtime/base/error.h"
#include "runtime/data/sharded_loader.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

constexpr int64_t kRows = 103;  // 103 = 8 * 12 + 7: a partial last batch at B = 12
constexpr int64_t kBatch = 12;  // divides by 1, 2 and 4
constexpr int kSample = 6;      // (3, 2, 1) images

struct World2 {
  int rank = 0, size = 1;
};

World2 world() {
  World2 w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  return w;
}

class LoaderMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = shared_temp_dir("loader-mpi");
    spec_.path = dir_ + "/data.h5";
    if (world().rank == 0) {
      ClassificationFixture f;
      f.rows = kRows;
      f.options.chunk = {10, 3, 2, 1};
      f.options.gzip_level = 4;
      write_classification(spec_.path, f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world().rank == 0) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  DatasetSpec spec_;
};

// Every rank's index slice of each step, gathered in rank order: the global batches as the ranks
// together saw them.
std::vector<std::vector<int64_t>> gather_global_batches(ShardedLoader& loader, int epoch,
                                                        uint64_t* bytes) {
  std::vector<std::vector<int64_t>> global;
  const uint64_t before = loader.bytes_read();
  loader.start_epoch(epoch);
  Batch b;
  while (loader.next(b)) {
    std::vector<int64_t> all(static_cast<size_t>(kBatch));
    MPI_Allgather(b.index.data(), static_cast<int>(b.rows), MPI_INT64_T, all.data(),
                  static_cast<int>(b.rows), MPI_INT64_T, MPI_COMM_WORLD);
    global.push_back(all);
    for (int64_t i = 0; i < b.valid; ++i) {
      const int64_t row = b.index[static_cast<size_t>(i)];
      EXPECT_EQ(b.labels[static_cast<size_t>(i)], row % 5);
      for (int q = 0; q < kSample; ++q)
        EXPECT_NEAR(b.x[static_cast<size_t>(i * kSample + q)], normalised_pixel(row, q), 1e-6);
    }
  }
  *bytes = loader.bytes_read() - before;
  return global;
}

TEST_F(LoaderMpi, EveryRowOnceAndTheSameGlobalBatchesAtAnyWorldSize) {
  const World2 w = world();
  LoaderOptions o;
  o.rows_per_step = kBatch;
  o.seed = 2024;
  auto loader = open_sharded_loader(spec_, o, *make_mpi_communicator());
  ASSERT_EQ(loader->steps_per_epoch(), 9);
  for (int epoch : {0, 1}) {
    uint64_t bytes = 0;
    const auto global = gather_global_batches(*loader, epoch, &bytes);
    const auto perm = ShardedLoader::permutation(kRows, 2024, epoch, true);
    ASSERT_EQ(global.size(), 9u);
    std::vector<int> uses(kRows, 0);
    for (size_t k = 0; k < global.size(); ++k)
      for (int64_t pos = 0; pos < kBatch; ++pos) {
        const int64_t p = static_cast<int64_t>(k) * kBatch + pos;
        const int64_t row = global[k][static_cast<size_t>(pos)];
        EXPECT_EQ(row, p < kRows ? perm[static_cast<size_t>(p)] : -1)
            << "P=" << w.size << " epoch " << epoch << " step " << k << " position " << pos;
        if (row >= 0) uses[static_cast<size_t>(row)]++;
      }
    EXPECT_EQ(uses, std::vector<int>(kRows, 1)) << "P=" << w.size << " epoch " << epoch;

    // This rank's bytes: its real rows times 7 bytes (6 pixels, 1 label), about 1/P of the split
    // (the partial batch is not split evenly, so within one rank's slice of it).
    const double share = static_cast<double>(kRows * 7) / w.size;
    EXPECT_NEAR(static_cast<double>(bytes), share, kBatch / w.size * 7.0) << "rank " << w.rank;
    uint64_t total = 0;
    MPI_Allreduce(&bytes, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, static_cast<uint64_t>(kRows * 7)) << "the ranks together read the split once";
  }
}

TEST_F(LoaderMpi, DropRemainderRunsTheSameStepsOnEveryRank) {
  LoaderOptions o;
  o.rows_per_step = kBatch;
  o.drop_remainder = true;
  auto loader = open_sharded_loader(spec_, o, *make_mpi_communicator());
  uint64_t bytes = 0;
  const auto global = gather_global_batches(*loader, 0, &bytes);
  ASSERT_EQ(global.size(), 8u);
  const auto perm = ShardedLoader::permutation(kRows, 0, 0, true);
  for (size_t k = 0; k < global.size(); ++k)
    for (int64_t pos = 0; pos < kBatch; ++pos)
      EXPECT_EQ(global[k][static_cast<size_t>(pos)], perm[k * kBatch + static_cast<size_t>(pos)]);
}

TEST_F(LoaderMpi, ABadInputOnOneRankStopsEveryRankWithItsMessage) {
  const World2 w = world();
  LoaderOptions o;
  o.rows_per_step = kBatch;
  DatasetSpec spec = spec_;
  if (w.rank == w.size - 1) spec.path = dir_ + "/only-the-last-rank-looks-here.h5";
  try {
    open_sharded_loader(spec, o, *make_mpi_communicator());
    ADD_FAILURE() << "rank " << w.rank << " went on";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("only-the-last-rank-looks-here.h5: no such file"),
              std::string::npos)
        << e.what();
  }
}

// A node's copy of the file, stale or cut short: the last rank reads another file than the others.
TEST_F(LoaderMpi, ARankReadingOtherDataIsNamedOnEveryRank) {
  const World2 w = world();
  if (w.size == 1) GTEST_SKIP() << "one rank reads what it reads: nothing to compare";
  LoaderOptions o;
  o.rows_per_step = kBatch;
  const std::string shorter = dir_ + "/shorter.h5", edited = dir_ + "/edited.h5";
  if (w.rank == w.size - 1) {
    ClassificationFixture f;
    f.rows = kRows - 1;
    write_classification(shorter, f);
    f.rows = kRows;
    write_classification(edited, f);
    // One pixel of the middle row changed; every shape and attribute the same.
    H5Id file(H5Fopen(edited.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    H5Id images(H5Dopen2(file.get(), "train/images", H5P_DEFAULT));
    H5Id space(H5Dget_space(images.get()));
    const hsize_t at[4] = {kRows / 2, 1, 1, 0}, one[4] = {1, 1, 1, 1};
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, at, nullptr, one, nullptr);
    H5Id mem(H5Screate_simple(4, one, nullptr));
    const uint8_t value = static_cast<uint8_t>(pixel_value(kRows / 2, 3) + 1);
    ASSERT_GE(H5Dwrite(images.get(), H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT, &value),
              0);
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {shorter, "shorter.h5 (train): 102 rows of (3, 2, 1) uint8, 5 classes, but rank 0 reads " +
                    spec_.path + " (train): 103 rows of (3, 2, 1) uint8, 5 classes"},
      {edited, "edited.h5 (train): 103 rows of (3, 2, 1) uint8, 5 classes, as rank 0's " +
                   spec_.path + " (train) does, but other values"}};
  for (const auto& [copy, want] : cases) {
    DatasetSpec spec = spec_;
    if (w.rank == w.size - 1) spec.path = copy;
    try {
      open_sharded_loader(spec, o, *make_mpi_communicator());
      ADD_FAILURE() << "rank " << w.rank << " went on reading " << spec.path;
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(w.size - 1) + " reads "), std::string::npos)
          << what;
      EXPECT_NE(what.find(want), std::string::npos) << what;
    }
  }
  // The same rows under another name (a copy on each node's disk) read as the first.
  DatasetSpec spec = spec_;
  if (w.rank == w.size - 1) {
    spec.path = dir_ + "/copy.h5";
    std::filesystem::copy_file(spec_.path, spec.path);
  }
  EXPECT_NO_THROW(open_sharded_loader(spec, o, *make_mpi_communicator()));
}

TEST_F(LoaderMpi, ABatchThatDoesNotDivideIsRefusedEverywhere) {
  const World2 w = world();
  if (w.size == 1) GTEST_SKIP() << "every batch divides by one rank";
  LoaderOptions o;
  o.rows_per_step = w.size * 3 + 1;
  try {
    open_sharded_loader(spec_, o, *make_mpi_communicator());
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    const std::string want =
        "try " + std::to_string(w.size * 3) + " or " + std::to_string(w.size * 4);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

}  // namespace
