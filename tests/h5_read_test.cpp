// h5_read::read_all_rows, the whole-split read of a split held in memory: the same bytes as one
// H5Dread of the dataset for every layout it decodes (gzip, shuffle, both, none; edge chunks;
// chunks never written or stored unfiltered, which HDF5 reads), at any thread count; false, having
// written nothing, for layouts it leaves to HDF5; and a damaged chunk a SharedInputError naming
// its rows.
#include "runtime/data/h5_read.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/data/hdf5_util.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

struct Layout {
  std::vector<hsize_t> dims;   // the dataset's shape
  std::vector<hsize_t> chunk;  // empty: contiguous
  bool shuffle = false;
  int gzip = -1;            // level, -1: none
  hsize_t written = 0;      // rows written (the rest never are); 0: all
  hsize_t unfiltered = -1;  // a chunk, by its first row, stored with its filters skipped
  bool gzip_first = false;  // the pipeline gzip, then shuffle
  bool extendible = false;  // rows unlimited (h5py's maxshape=(None, ...)): chunks may be longer
};

class ReadAllRows : public ::testing::Test {
 protected:
  std::string dir_ = local_temp_dir("h5read");
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes dataset "x" of `type` with values that use every byte of an element, and returns the
  // file's path.
  std::string write(const std::string& name, hid_t type, const Layout& l) {
    Hdf5Lock lock;
    const std::string path = dir_ + "/" + name;
    H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    std::vector<hsize_t> max_dims = l.dims;
    if (l.extendible) max_dims[0] = H5S_UNLIMITED;
    H5Id space(H5Screate_simple(static_cast<int>(l.dims.size()), l.dims.data(), max_dims.data()));
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
    if (!l.chunk.empty()) {
      H5Pset_chunk(dcpl.get(), static_cast<int>(l.chunk.size()), l.chunk.data());
      if (l.shuffle && !l.gzip_first) H5Pset_shuffle(dcpl.get());
      if (l.gzip >= 0) H5Pset_deflate(dcpl.get(), static_cast<unsigned>(l.gzip));
      if (l.shuffle && l.gzip_first) H5Pset_shuffle(dcpl.get());
    }
    const size_t elem = H5Tget_size(type);
    std::vector<unsigned char> fill(elem, 0x5a);
    H5Pset_fill_value(dcpl.get(), type, fill.data());
    H5Id dset(H5Dcreate2(file.get(), "x", type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    EXPECT_TRUE(dset.valid());
    size_t row = elem;
    for (size_t d = 1; d < l.dims.size(); ++d) row *= l.dims[d];
    const hsize_t rows = l.written > 0 ? l.written : l.dims[0];
    std::vector<unsigned char> data(rows * row);
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
    std::vector<hsize_t> start(l.dims.size(), 0), count = l.dims;
    count[0] = rows;
    H5Id mem(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    EXPECT_GE(H5Dwrite(dset.get(), type, mem.get(), space.get(), H5P_DEFAULT, data.data()), 0);
    if (l.unfiltered != static_cast<hsize_t>(-1)) {
      // The chunk's bytes as they are, its filters marked skipped (what HDF5 does where an
      // optional filter fails).
      std::vector<hsize_t> offset(l.dims.size(), 0);
      offset[0] = l.unfiltered;
      const size_t bytes = l.chunk[0] * row;
      std::vector<unsigned char> raw(bytes);
      for (size_t i = 0; i < bytes; ++i) raw[i] = static_cast<unsigned char>(i * 7 + 1);
      EXPECT_GE(
          H5Dwrite_chunk(dset.get(), H5P_DEFAULT, 0xffffffffu, offset.data(), bytes, raw.data()),
          0);
    }
    return path;
  }

  // The dataset read by one H5Dread, and by read_all_rows on `threads` threads; where it
  // declines, whether it left the buffer as it was.
  struct Reads {
    std::vector<unsigned char> hdf5, ours;
    bool decoded = false, untouched = true;
  };
  Reads read(const std::string& path, hid_t type, int threads) {
    Reads r;
    H5Id file, dset;
    std::vector<int64_t> dims;
    {
      Hdf5Lock lock;
      file = H5Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
      dset = H5Id(H5Dopen2(file.get(), "x", H5P_DEFAULT));
      dims = h5_read::dims_of(dset.get());
      size_t bytes = H5Tget_size(type);
      for (int64_t d : dims) bytes *= static_cast<size_t>(d);
      r.hdf5.resize(bytes);
      EXPECT_GE(H5Dread(dset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, r.hdf5.data()), 0);
    }
    r.ours.assign(r.hdf5.size(), 0xee);
    r.decoded = h5_read::read_all_rows(dset.get(), dims, type, r.ours.data(), "f.h5: /x", threads);
    if (!r.decoded) r.untouched = r.ours == std::vector<unsigned char>(r.hdf5.size(), 0xee);
    Hdf5Lock lock;
    dset.reset();
    file.reset();
    return r;
  }
};

TEST_F(ReadAllRows, GivesHdf5sBytesForEveryLayoutItDecodesAtAnyThreadCount) {
  struct Case {
    const char* name;
    hid_t type;
    Layout layout;
  };
  const std::vector<Case> cases = {
      {"gzip u8, an edge chunk", H5T_NATIVE_UINT8, {{37, 3, 2}, {8, 3, 2}, false, 4}},
      {"shuffle + gzip f32", H5T_NATIVE_FLOAT, {{41, 5}, {6, 5}, true, 1}},
      {"shuffle i16, no gzip", H5T_NATIVE_INT16, {{19, 4}, {4, 4}, true, -1}},
      {"plain chunks f64", H5T_NATIVE_DOUBLE, {{10, 3}, {3, 3}, false, -1}},
      {"rows unlimited, one chunk longer than them",
       H5T_NATIVE_INT32,
       {{5, 2}, {64, 2}, true, 9, 0, static_cast<hsize_t>(-1), false, true}},
      {"rows never written: the fill value", H5T_NATIVE_UINT16, {{40, 3}, {8, 3}, true, 6, 13}},
      {"a chunk stored unfiltered", H5T_NATIVE_INT32, {{24, 2}, {8, 2}, true, 4, 0, 8}},
  };
  for (const Case& c : cases) {
    const std::string path = write(std::to_string(&c - cases.data()) + ".h5", c.type, c.layout);
    for (int threads : {1, 3}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(threads) + " thread(s)");
      const Reads r = read(path, c.type, threads);
      EXPECT_TRUE(r.decoded);
      EXPECT_EQ(r.ours, r.hdf5);
    }
  }
}

TEST_F(ReadAllRows, LeavesOtherLayoutsToHdf5HavingWrittenNothing) {
  struct Case {
    const char* name;
    hid_t file_type, read_type;
    Layout layout;
  };
  const std::vector<Case> cases = {
      {"contiguous", H5T_NATIVE_UINT8, H5T_NATIVE_UINT8, {{12, 4}, {}}},
      {"chunks narrower than a row",
       H5T_NATIVE_UINT8,
       H5T_NATIVE_UINT8,
       {{12, 4}, {4, 2}, false, 4}},
      {"stored big-endian", H5T_STD_I32BE, H5T_NATIVE_INT32, {{12, 4}, {4, 4}, false, 4}},
      {"gzip before shuffle",
       H5T_NATIVE_INT32,
       H5T_NATIVE_INT32,
       {{12, 4}, {4, 4}, true, 4, 0, static_cast<hsize_t>(-1), true}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path =
        write(std::to_string(&c - cases.data()) + ".h5", c.file_type, c.layout);
    const Reads r = read(path, c.read_type, 2);
    EXPECT_FALSE(r.decoded);
    EXPECT_TRUE(r.untouched);
  }
}

TEST_F(ReadAllRows, ADamagedChunkIsAnErrorNamingItsRows) {
  const std::string path = write("damaged.h5", H5T_NATIVE_FLOAT, {{40, 16}, {8, 16}, true, 4});
  haddr_t address = 0;
  hsize_t size = 0;
  {
    Hdf5Lock lock;
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    H5Id dset(H5Dopen2(file.get(), "x", H5P_DEFAULT));
    const hsize_t offset[2] = {16, 0};
    unsigned mask = 0;
    ASSERT_GE(H5Dget_chunk_info_by_coord(dset.get(), offset, &mask, &address, &size), 0);
  }
  ASSERT_GT(size, 16u);
  {
    // The middle of the third chunk's deflate stream overwritten.
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(address + size / 2), SEEK_SET);
    const unsigned char junk[8] = {0xff, 0x00, 0xff, 0x00, 0x13, 0x37, 0xff, 0xff};
    std::fwrite(junk, 1, sizeof(junk), f);
    std::fclose(f);
  }
  Hdf5Lock lock;
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  H5Id dset(H5Dopen2(file.get(), "x", H5P_DEFAULT));
  std::vector<float> out(40 * 16);
  try {
    h5_read::read_all_rows(dset.get(), {40, 16}, H5T_NATIVE_FLOAT, out.data(), "f.h5: /x", 2);
    ADD_FAILURE() << "a damaged chunk was read";
  } catch (const SharedInputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("f.h5: /x: rows 16 to 23 cannot be read"), std::string::npos) << what;
    EXPECT_NE(what.find("damaged"), std::string::npos) << what;
  }
}

}  // namespace
