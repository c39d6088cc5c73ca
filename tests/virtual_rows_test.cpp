// A split joined from shard files by HDF5 virtual datasets (lockstep-data join's files, h5py's
// VirtualLayout): DatasetReader reads the shards directly where the virtual dataset lays whole rows
// of them end to end (row_sources, h5_virtual.h) and through HDF5 otherwise; either way a batch
// holds the rows the virtual dataset maps, shuffled or held in memory. A shard whose writer
// stopped early is refused naming the shard, as a file of its own would be, and so is a split over
// more shards than the process may keep open (HDF5 reads those it cannot open as zeros); a soft
// limit on open files below what the shards need is raised.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "data_fixtures.h"
#include "runtime/base/error.h"
#include "runtime/data/dataset.h"
#include "runtime/data/h5_virtual.h"
#include "runtime/data/h5_writer.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

constexpr int64_t kSample = 6;  // the fixture's rows of 3 x 2 x 1 pixels

// One mapping of a virtual dataset: `rows` rows from `src_first` of shard `file` (or, with
// src_step 2, every other row from there) placed from row `first`.
struct Mapping {
  std::string file;
  int64_t first, rows, src_first;
  int64_t src_step = 1;
};

class VirtualRows : public ::testing::Test {
 protected:
  std::string dir_ = local_temp_dir("virtual_rows");
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // A shard of `rows` fixture rows (row r's pixels pixel_value(r, k), its label r % 5), in chunks
  // of 4 rows, gzip.
  std::string shard(const std::string& name, int64_t rows) {
    ClassificationFixture f;
    f.rows = rows;
    f.options.chunk = {4, 3, 2, 1};
    f.options.gzip_level = 1;
    return write_classification(path(name), f);
  }

  // joined.h5 with train/images and train/labels virtual, `rows` rows laid out by `maps`, and the
  // fixture's attributes.
  std::string join(const std::vector<Mapping>& maps, int64_t rows) {
    const std::string out = path("joined.h5");
    H5Id file = create_h5_file(out);
    H5Id group(H5Gcreate2(file.get(), "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    for (const std::string name : {"images", "labels"}) {
      std::vector<hsize_t> dims = {static_cast<hsize_t>(rows)};
      if (name == "images") dims.insert(dims.end(), {3, 2, 1});
      H5Id vspace(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
      H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
      for (const Mapping& m : maps) {
        std::vector<hsize_t> start(dims.size(), 0), count = dims, stride(dims.size(), 1);
        start[0] = static_cast<hsize_t>(m.first);
        count[0] = static_cast<hsize_t>(m.rows);
        EXPECT_GE(H5Sselect_hyperslab(vspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                      count.data(), nullptr),
                  0);
        std::vector<hsize_t> src_dims = dims;
        src_dims[0] = static_cast<hsize_t>(m.src_first + m.rows * m.src_step);
        H5Id src(H5Screate_simple(static_cast<int>(src_dims.size()), src_dims.data(), nullptr));
        start[0] = static_cast<hsize_t>(m.src_first);
        stride[0] = static_cast<hsize_t>(m.src_step);
        std::vector<hsize_t> block(dims.size(), 1);
        std::vector<hsize_t> src_count = count;
        for (size_t d = 1; d < dims.size(); ++d) {
          block[d] = dims[d];
          src_count[d] = 1;
        }
        EXPECT_GE(H5Sselect_hyperslab(src.get(), H5S_SELECT_SET, start.data(), stride.data(),
                                      src_count.data(), block.data()),
                  0);
        EXPECT_GE(H5Pset_virtual(dcpl.get(), vspace.get(), m.file.c_str(),
                                 ("/train/" + name).c_str(), src.get()),
                  0);
      }
      H5Sselect_all(vspace.get());
      H5Id dset(H5Dcreate2(group.get(), name.c_str(), H5T_STD_U8LE, vspace.get(), H5P_DEFAULT,
                           dcpl.get(), H5P_DEFAULT));
      EXPECT_TRUE(dset.valid()) << name;
    }
    write_h5_attr_int(file.get(), "num_classes", 5);
    write_h5_attr_double(file.get(), "norm_mean", kFixtureMean);
    write_h5_attr_double(file.get(), "norm_std", kFixtureStd);
    return out;
  }

  // Reads rows `ids` of `file`'s training split (held in memory or read from the file) and checks
  // each against the shard row `source(id)` names.
  template <class Source>
  void expect_rows(const std::string& file, const std::vector<int64_t>& ids, bool in_memory,
                   Source source) {
    DatasetSpec spec;
    spec.path = file;
    spec.group = "train";
    DatasetReader reader(spec, kDefaultChunkCacheBytes, in_memory ? (int64_t{1} << 30) : 0);
    std::vector<float> x(ids.size() * kSample);
    std::vector<int32_t> labels(ids.size());
    reader.read_rows(ids.data(), ids.size(), x.data(), labels.data(), nullptr);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t row = source(ids[i]);
      EXPECT_EQ(labels[i], row % 5) << "row " << ids[i] << (in_memory ? " (in memory)" : "");
      for (int64_t k = 0; k < kSample; ++k)
        ASSERT_NEAR(x[i * kSample + static_cast<size_t>(k)], normalised_pixel(row, k), 1e-6)
            << "row " << ids[i] << " pixel " << k << (in_memory ? " (in memory)" : "");
    }
  }
};

TEST_F(VirtualRows, ShardsLaidEndToEndAreReadDirectlyInTheirMappedOrder) {
  shard("a.h5", 10);
  shard("b.h5", 9);
  shard("c.h5", 5);
  // Mappings given out of row order; b's rows 2-8 only (a block within the source).
  const std::string file = join({{"c.h5", 17, 5, 0}, {"a.h5", 0, 10, 0}, {"b.h5", 10, 7, 2}}, 22);
  {
    Hdf5Lock lock;
    H5Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    H5Id d(H5Dopen2(f.get(), "train/images", H5P_DEFAULT));
    const std::vector<RowSource> sources = row_sources(d.get(), file, 1 << 20, "joined");
    ASSERT_EQ(sources.size(), 3u) << "the shards are laid end to end: read directly";
    EXPECT_EQ(sources[1].first, 10);
    EXPECT_EQ(sources[1].src_first, 2);
    EXPECT_EQ(sources[2].rows, 5);
  }
  // Shard row of joined row v: a's v, b's v - 10 + 2, c's v - 17.
  const auto source = [](int64_t v) { return v < 10 ? v : v < 17 ? v - 8 : v - 17; };
  const std::vector<int64_t> ids = {21, 0, 9, 10, 16, 17, 3, 3, 12, 11, 20};
  for (bool in_memory : {false, true}) expect_rows(file, ids, in_memory, source);
}

TEST_F(VirtualRows, OtherMappingsAreReadThroughHdf5) {
  shard("a.h5", 12);
  shard("b.h5", 4);
  // Every other row of a: not whole rows laid end to end.
  const std::string file = join({{"a.h5", 0, 6, 0, 2}, {"b.h5", 6, 4, 0}}, 10);
  {
    Hdf5Lock lock;
    H5Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    H5Id d(H5Dopen2(f.get(), "train/images", H5P_DEFAULT));
    EXPECT_TRUE(row_sources(d.get(), file, 1 << 20, "joined").empty());
  }
  const auto source = [](int64_t v) { return v < 6 ? 2 * v : v - 6; };
  std::vector<int64_t> ids(10);
  std::iota(ids.rbegin(), ids.rend(), 0);
  for (bool in_memory : {false, true}) expect_rows(file, ids, in_memory, source);
}

TEST_F(VirtualRows, AShardWithRowsNeverWrittenIsRefusedNamingIt) {
  shard("a.h5", 8);
  {
    // b.h5's images: 8 rows in chunks of 4, only the first chunk written.
    H5Id f = create_h5_file(path("b.h5"));
    ClassificationFixture fx;
    fx.rows = 4;
    fx.options.chunk = {4, 3, 2, 1};
    fx.options.gzip_level = 1;
    write_classification(f.get(), fx);
    H5Ldelete(f.get(), "train/images", H5P_DEFAULT);
    const hsize_t dims[4] = {8, 3, 2, 1}, chunk[4] = {4, 3, 2, 1}, part[4] = {4, 3, 2, 1};
    H5Id space(H5Screate_simple(4, dims, nullptr)), dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 4, chunk);
    H5Id d(H5Dcreate2(f.get(), "train/images", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                      H5P_DEFAULT));
    std::vector<uint8_t> first(24, 7);
    H5Id mem(H5Screate_simple(4, part, nullptr));
    const hsize_t at[4] = {0, 0, 0, 0};
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, at, nullptr, part, nullptr);
    ASSERT_GE(
        H5Dwrite(d.get(), H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT, first.data()), 0);
  }
  // b's labels have 4 rows; its images are mapped for 4 rows too: the unwritten chunk (rows 4-7)
  // lies outside the mapping but the shard is incomplete all the same.
  const std::string file = join({{"a.h5", 0, 8, 0}, {"b.h5", 8, 4, 0}}, 12);
  DatasetSpec spec;
  spec.path = file;
  spec.group = "train";
  try {
    inspect_dataset(spec);
    ADD_FAILURE() << "a joined split over a shard never fully written was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("b.h5: /train/images: 1 of its 2 chunks were never written"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("rows 8-11"), std::string::npos) << what;
  }
}

// 100 shards of 3 rows each, joined in order: joined row v is row v % 3 of shard v / 3.
class ManyShards : public VirtualRows {
 protected:
  std::string file_;
  void SetUp() override {
    std::vector<Mapping> maps;
    for (int k = 0; k < 100; ++k) {
      char name[16];
      std::snprintf(name, sizeof name, "s%d.h5", k);
      shard(name, 3);
      maps.push_back({name, 3 * k, 3, 0});
    }
    file_ = join(maps, 300);
  }
  static rlim_t open_now() {
    rlim_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)entry;
      ++n;
    }
    return n;
  }
};

TEST_F(ManyShards, ASoftLimitOnOpenFilesBelowTheShardsIsRaised) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = open_now() + 40;
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < open_now() + 200)
    GTEST_SKIP() << "this process may open only " << saved.rlim_max << " files (ulimit -Hn)";
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int64_t> ids(300);
  std::iota(ids.begin(), ids.end(), 0);
  std::reverse(ids.begin(), ids.end());
  expect_rows(file_, ids, false, [](int64_t v) { return v % 3; });
  rlimit now{};
  getrlimit(RLIMIT_NOFILE, &now);
  EXPECT_GT(now.rlim_cur, low.rlim_cur) << "the soft limit was not raised";
  setrlimit(RLIMIT_NOFILE, &saved);
}

TEST_F(ManyShards, MoreShardsThanTheProcessMayOpenAreRefused) {
  // In a child process: the hard limit cannot be raised again once lowered.
  const std::string file = file_;
  EXPECT_EXIT(
      {
        rlimit low{};
        low.rlim_cur = low.rlim_max = open_now() + 40;
        if (setrlimit(RLIMIT_NOFILE, &low) != 0) std::_Exit(4);
        DatasetSpec spec;
        spec.path = file;
        spec.group = "train";
        try {
          inspect_dataset(spec);
        } catch (const UsageError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(3);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(3),
      "joined.h5: train/images: is a virtual dataset over 100 files, and this process may have "
      "[0-9]+ files open at once \\(ulimit -n");
}

}  // namespace
