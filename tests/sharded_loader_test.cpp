// ShardedLoader in one process: the permutation contract, option validation, and P ranks simulated
// by P loaders (the loader takes rank and size as arguments), so the sharding rules are checked at
// world sizes mpiexec does not give here; loader_mpi_test.cpp checks the same across real ranks.
#include "runtime/data/sharded_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "data_fixtures.h"
#include "runtime/base/error.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

std::vector<int64_t> iota_rows(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(Permutation, IsAPermutationFixedBySeedAndEpoch) {
  const auto p = ShardedLoader::permutation(1000, 42, 0, true);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota_rows(1000));
  EXPECT_NE(p, iota_rows(1000));
  EXPECT_EQ(p, ShardedLoader::permutation(1000, 42, 0, true)) << "same seed and epoch, same order";
  EXPECT_NE(p, ShardedLoader::permutation(1000, 42, 1, true)) << "the next epoch reshuffles";
  EXPECT_NE(p, ShardedLoader::permutation(1000, 43, 0, true)) << "another seed, another order";
  EXPECT_EQ(ShardedLoader::permutation(1000, 42, 3, false), iota_rows(1000))
      << "shuffle off: file order";
  EXPECT_TRUE(ShardedLoader::permutation(0, 1, 0, true).empty());
  EXPECT_EQ(ShardedLoader::permutation(1, 1, 0, true), iota_rows(1));
}

// The order is part of the contract: a run resumed from a checkpoint, or continued on a machine
// with another compiler or standard library, must see the same batches. mt19937_64 is fixed by the
// C++ standard and the draw and shuffle are ours, so these values hold everywhere.
TEST(Permutation, IsTheSameOnEveryPlatform) {
  EXPECT_EQ(ShardedLoader::permutation(10, 1, 0, true),
            (std::vector<int64_t>{4, 6, 8, 9, 3, 5, 7, 2, 0, 1}));
  EXPECT_EQ(ShardedLoader::permutation(10, 1, 1, true),
            (std::vector<int64_t>{4, 3, 6, 5, 8, 7, 2, 0, 1, 9}));
}

TEST(Permutation, EveryRowIsEquallyLikelyFirst) {
  // 4000 epochs of 5 rows: each row should lead about 800 times (a biased draw shows here).
  std::vector<int> first(5, 0);
  for (int e = 0; e < 4000; ++e)
    first[static_cast<size_t>(ShardedLoader::permutation(5, 9, e, true)[0])]++;
  for (int c : first) EXPECT_NEAR(c, 800, 120);
}

TEST(SuggestBatchSizes, NamesTheNearestMultiples) {
  EXPECT_EQ(suggest_batch_sizes(127, 2), "try 126 or 128");
  EXPECT_EQ(suggest_batch_sizes(100, 8), "try 96 or 104");
  EXPECT_EQ(suggest_batch_sizes(3, 4), "try 4");
}

class Loader : public ::testing::Test {
 protected:
  std::string dir_ = local_temp_dir("loader");
  void TearDown() override { std::filesystem::remove_all(dir_); }

  DatasetSpec make(int64_t rows, bool chunked = true) {
    ClassificationFixture f;
    f.rows = rows;
    if (chunked) {
      f.options.chunk = {8, 3, 2, 1};
      f.options.gzip_level = 4;
    }
    DatasetSpec s;
    s.path =
        write_classification(dir_ + "/d" + std::to_string(rows) + (chunked ? "c" : "") + ".h5", f);
    return s;
  }

  static std::vector<Batch> run_epoch(ShardedLoader& loader, int epoch, int64_t first_step = 0) {
    std::vector<Batch> out;
    loader.start_epoch(epoch, first_step);
    Batch b;
    while (loader.next(b)) out.push_back(b);
    return out;
  }

  // The constructor refuses `options` at `size` ranks with a UsageError containing `words`.
  void expect_refused(const DatasetSpec& spec, const LoaderOptions& options, int size,
                      const std::vector<std::string>& words) {
    try {
      ShardedLoader loader(spec, options, 0, size);
      ADD_FAILURE() << "accepted";
    } catch (const UsageError& e) {
      for (const auto& w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  }
};

LoaderOptions batch_of(int64_t b) {
  LoaderOptions o;
  o.rows_per_step = b;
  o.seed = 11;
  return o;
}

TEST_F(Loader, RefusesBatchSizesThatCannotBeSharded) {
  const DatasetSpec spec = make(10);
  expect_refused(spec, batch_of(0), 1, {"rows per step", "positive"});
  expect_refused(spec, batch_of(3), 4, {"rows per step 3", "fewer than the 4 ranks", "try 4"});
  expect_refused(spec, batch_of(10), 4, {"rows per step 10", "does not divide", "try 8 or 12"});
  LoaderOptions drop = batch_of(12);
  drop.drop_remainder = true;
  expect_refused(spec, drop, 1, {"10 rows", "fewer than the rows per step 12", "no step"});
  LoaderOptions bad_prefetch = batch_of(2);
  bad_prefetch.prefetch = -1;
  expect_refused(spec, bad_prefetch, 1, {"prefetch"});
  DatasetSpec missing;
  missing.path = dir_ + "/missing.h5";
  expect_refused(missing, batch_of(2), 1, {"missing.h5", "no such file"});
}

// P simulated ranks, one epoch: global batch k is permutation[kB, (k+1)B), rank r holds positions
// [r B/P, (r+1) B/P) of it, the partial last batch is padded with masked rows, every row is used
// exactly once, and each row's pixels and label are that row's.
TEST_F(Loader, EverySampleOnceAndTheSameGlobalBatchesAtEveryWorldSize) {
  const DatasetSpec spec = make(50);
  const int64_t B = 12, rows = 50;
  const auto perm = ShardedLoader::permutation(rows, 11, 2, true);
  for (int P : {1, 2, 3, 4}) {
    std::vector<std::vector<Batch>> ranks;
    for (int r = 0; r < P; ++r) {
      ShardedLoader loader(spec, batch_of(B), r, P);
      EXPECT_EQ(loader.steps_per_epoch(), 5);
      ranks.push_back(run_epoch(loader, 2));
    }
    std::vector<int> uses(rows, 0);
    for (int64_t k = 0; k < 5; ++k) {
      std::vector<int64_t> global;
      for (int r = 0; r < P; ++r) {
        const Batch& b = ranks[static_cast<size_t>(r)][static_cast<size_t>(k)];
        ASSERT_EQ(b.rows, B / P);
        EXPECT_EQ(b.step, k);
        EXPECT_EQ(b.epoch, 2);
        EXPECT_EQ(b.global_valid, std::min<int64_t>(B, rows - k * B));
        int64_t valid = 0;
        for (int64_t i = 0; i < b.rows; ++i) {
          const int64_t row = b.index[static_cast<size_t>(i)];
          global.push_back(row);
          EXPECT_EQ(b.mask[static_cast<size_t>(i)], row >= 0 ? 1.0f : 0.0f);
          if (row < 0) {
            EXPECT_EQ(b.x[static_cast<size_t>(i * 6)], 0.0f) << "padding rows are zero";
            continue;
          }
          ++valid;
          uses[static_cast<size_t>(row)]++;
          EXPECT_EQ(b.labels[static_cast<size_t>(i)], row % 5);
          for (int64_t q = 0; q < 6; ++q)
            EXPECT_NEAR(b.x[static_cast<size_t>(i * 6 + q)], normalised_pixel(row, q), 1e-6);
        }
        EXPECT_EQ(b.valid, valid);
      }
      for (int64_t pos = 0; pos < B; ++pos) {
        const int64_t want = k * B + pos < rows ? perm[static_cast<size_t>(k * B + pos)] : -1;
        EXPECT_EQ(global[static_cast<size_t>(pos)], want)
            << "P=" << P << " step " << k << " position " << pos;
      }
    }
    EXPECT_EQ(uses, std::vector<int>(rows, 1)) << "P=" << P;
  }
}

TEST_F(Loader, DropRemainderSkipsThePartialBatchOnEveryRank) {
  const DatasetSpec spec = make(50);
  LoaderOptions o = batch_of(12);
  o.drop_remainder = true;
  for (int r = 0; r < 2; ++r) {
    ShardedLoader loader(spec, o, r, 2);
    EXPECT_EQ(loader.steps_per_epoch(), 4);
    auto batches = run_epoch(loader, 0);
    ASSERT_EQ(batches.size(), 4u);
    for (const Batch& b : batches) {
      EXPECT_EQ(b.valid, 6);
      EXPECT_EQ(b.global_valid, 12);
    }
  }
}

TEST_F(Loader, ShuffleOffReadsTheFileInOrder) {
  LoaderOptions o = batch_of(4);
  o.shuffle = false;
  ShardedLoader loader(make(10, false), o, 1, 2);
  auto batches = run_epoch(loader, 5);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].index, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(batches[1].index, (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(batches[2].index, (std::vector<int64_t>{-1, -1}));  // rows 8, 9 went to rank 0
  EXPECT_EQ(batches[2].valid, 0);
  EXPECT_EQ(batches[2].global_valid, 2);
}

TEST_F(Loader, PrefetchDepthAndResumeDoNotChangeTheBatches) {
  const DatasetSpec spec = make(40);
  std::vector<std::vector<Batch>> runs;
  for (int depth : {0, 1, 4}) {
    LoaderOptions o = batch_of(8);
    o.prefetch = depth;
    ShardedLoader loader(spec, o, 1, 2);
    runs.push_back(run_epoch(loader, 1));
    auto tail = run_epoch(loader, 1, 3);  // resume at step 3 of the same epoch
    ASSERT_EQ(tail.size(), 2u);
    EXPECT_EQ(tail[0].index, runs.back()[3].index);
    EXPECT_EQ(tail[1].x, runs.back()[4].x);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    ASSERT_EQ(runs[i].size(), runs[0].size());
    for (size_t k = 0; k < runs[0].size(); ++k) {
      EXPECT_EQ(runs[i][k].index, runs[0][k].index);
      EXPECT_EQ(runs[i][k].x, runs[0][k].x);
      EXPECT_EQ(runs[i][k].labels, runs[0][k].labels);
    }
  }
}

TEST_F(Loader, EpochsCanBeRestartedAbandonedAndOverrun) {
  const DatasetSpec spec = make(200);
  LoaderOptions o = batch_of(4);
  o.prefetch = 3;
  ShardedLoader loader(spec, o, 0, 1);
  Batch b;
  EXPECT_THROW(loader.next(b), Error) << "next() before start_epoch";
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next(b));
  loader.start_epoch(1);  // abandons epoch 0 while its prefetch thread is ahead
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.epoch, 1);
  EXPECT_EQ(b.step, 0);
  EXPECT_THROW(loader.start_epoch(1, 51), UsageError) << "an epoch has 50 steps";
  loader.start_epoch(2, 50);
  EXPECT_FALSE(loader.next(b));
  EXPECT_FALSE(loader.next(b));
  loader.start_epoch(3);
  ASSERT_TRUE(loader.next(b));
  // Destroying the loader here, with its thread mid-epoch, must return.
}

TEST_F(Loader, EachRankReadsItsShareOfTheBytes) {
  const DatasetSpec spec = make(1000);
  const uint64_t row_bytes = 6 + 1;  // 6 image bytes, 1 label byte
  for (int P : {1, 2, 4}) {
    uint64_t total = 0;
    for (int r = 0; r < P; ++r) {
      ShardedLoader loader(spec, batch_of(40), r, P);
      run_epoch(loader, 0);
      const uint64_t first = loader.bytes_read();
      run_epoch(loader, 1);
      const uint64_t second = loader.bytes_read() - first;
      total += first;
      EXPECT_EQ(first, 1000 / P * row_bytes) << "P=" << P << " rank " << r;
      EXPECT_EQ(second, first) << "every epoch reads the same amount";
    }
    EXPECT_EQ(total, 1000 * row_bytes) << "P=" << P << ": the ranks together read the split once";
  }
}

// A split held in memory gives the same batches as one read from the file, for every kind of
// split, at every rank and epoch, and is read from the file once, whole, on each rank; a split
// larger than the limit keeps reading each rank's own rows.
TEST_F(Loader, ASplitHeldInMemoryGivesTheSameBatchesAndIsReadOnce) {
  DatasetSpec regression, tokens;
  regression.path = write_regression(dir_ + "/r.h5", 23, 2, 3);
  tokens.path = write_tokens<uint8_t>(dir_ + "/t.h5", 21, 3, 256);
  const std::vector<DatasetSpec> specs = {make(37), make(37, false), regression, tokens};
  const uint64_t whole[] = {37 * 7, 37 * 7, 23 * (2 + 3) * 4, 21 * 4};  // bytes as stored
  for (size_t k = 0; k < specs.size(); ++k) {
    for (int rank : {0, 1}) {
      SCOPED_TRACE("split " + std::to_string(k) + ", rank " + std::to_string(rank));
      LoaderOptions from_file = batch_of(6), held = batch_of(6);
      held.in_memory_bytes = static_cast<int64_t>(whole[k]);
      ShardedLoader a(specs[k], from_file, rank, 2), b(specs[k], held, rank, 2);
      for (int epoch : {0, 1}) {
        const auto want = run_epoch(a, epoch), got = run_epoch(b, epoch);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(got[i].index, want[i].index);
          EXPECT_EQ(got[i].x, want[i].x);
          EXPECT_EQ(got[i].labels, want[i].labels);
          EXPECT_EQ(got[i].targets, want[i].targets);
          EXPECT_EQ(got[i].mask, want[i].mask);
        }
        EXPECT_EQ(b.bytes_read(), whole[k]) << "the whole split, once, after epoch " << epoch;
      }
      EXPECT_LT(a.bytes_read(), 2 * whole[k]) << "from the file: this rank's rows of two epochs";
      held.in_memory_bytes = static_cast<int64_t>(whole[k]) - 1;  // one byte short
      ShardedLoader c(specs[k], held, rank, 2);
      run_epoch(c, 0);
      EXPECT_LT(c.bytes_read(), whole[k]) << "over the limit: only this rank's rows";
    }
  }
}

TEST_F(Loader, ReportsTheTimeSpentWaitingForData) {
  LoaderOptions o = batch_of(10);
  o.prefetch = 0;  // every read happens inside next(), so the wait is the read time
  ShardedLoader loader(make(100), o, 0, 1);
  double sum = 0;
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) {
    EXPECT_GT(b.wait_seconds, 0.0);
    sum += b.wait_seconds;
  }
  EXPECT_NEAR(loader.wait_seconds_total(), sum, 1e-9);
}

TEST_F(Loader, RegressionBatchesCarryTargets) {
  DatasetSpec spec;
  spec.path = write_regression(dir_ + "/r.h5", 9, 2, 3);
  ShardedLoader loader(spec, batch_of(4), 1, 2);
  for (const Batch& b : run_epoch(loader, 0)) {
    EXPECT_TRUE(b.labels.empty());
    ASSERT_EQ(b.targets.size(), 6u);
    for (int64_t i = 0; i < b.rows; ++i) {
      const int64_t row = b.index[static_cast<size_t>(i)];
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(b.targets[static_cast<size_t>(i * 3 + j)],
                  row >= 0 ? target_value(row, j) : 0.0f);
    }
  }
}

// A token split's batch holds T labels per row (the next token at each position), zero for a
// padding row, while the mask stays one value per row.
TEST_F(Loader, TokenBatchesHoldALabelPerPosition) {
  DatasetSpec spec;
  spec.path = write_tokens<uint8_t>(dir_ + "/t.h5", 5, 3, 256);
  LoaderOptions o = batch_of(4);
  o.shuffle = false;
  ShardedLoader loader(spec, o, 1, 2);  // rank 1 of 2: rows 2, 3 then padding
  const std::vector<Batch> batches = run_epoch(loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  for (const Batch& b : batches) {
    ASSERT_EQ(b.labels.size(), 6u);
    ASSERT_EQ(b.x.size(), 6u);
    ASSERT_EQ(b.mask.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const int64_t row = b.index[i];
      EXPECT_EQ(b.mask[i], row >= 0 ? 1.0f : 0.0f);
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(b.labels[i * 3 + static_cast<size_t>(k)],
                  row >= 0 ? token_value(row, k + 1, 256) : 0);
    }
  }
  EXPECT_EQ(batches[1].valid, 0);  // the last global batch holds only row 4, on rank 0
}

// HDF5 is not thread-safe: the main thread writing one file and opening the loader's own file
// while the prefetch thread reads must go through the shared lock (without it this test crashes
// or reads wrong data).
TEST_F(Loader, MainThreadCanUseHdf5WhileThePrefetchThreadReads) {
  const DatasetSpec spec = make(20000);
  LoaderOptions o = batch_of(256);
  o.prefetch = 2;
  ShardedLoader loader(spec, o, 0, 1);
  H5Id side = create_h5_file(dir_ + "/side.h5");
  loader.start_epoch(0);
  Batch b;
  int step = 0;
  while (loader.next(b)) {
    for (int i = 0; i < 20; ++i) {
      write_h5_attr_int(side.get(), "step", step * 100 + i);
      ASSERT_EQ(read_h5_attr_int(side.get(), "step"), step * 100 + i);
    }
    EXPECT_EQ(inspect_dataset(spec).rows, 20000);  // the loader's own file, opened again
    for (int64_t i = 0; i < b.valid; ++i)
      ASSERT_NEAR(b.x[static_cast<size_t>(i * 6 + 5)],
                  normalised_pixel(b.index[static_cast<size_t>(i)], 5), 1e-6);
    ++step;
  }
  EXPECT_EQ(step, 79);
}

}  // namespace
