// The IDX reader over files written here: valid ones (gzip and plain) read back exactly; every kind
// of damage (wrong magic, bad dimensions, truncated header or data, trailing bytes, a broken gzip
// stream) is a UsageError naming the file. Plus the real Fashion-MNIST label file when installed.
#include "runtime/data/idx_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "test_util.h"

using namespace lockstep;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes counting(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

class IdxReader : public ::testing::Test {
 protected:
  std::string dir_ = testing_util::local_temp_dir("idx");
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write_gz(const std::string& name, const Bytes& bytes) {
    std::string path = dir_ + "/" + name;
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  std::string write_plain(const std::string& name, const Bytes& bytes) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  // The read fails with a UsageError whose text names the file and contains `what`.
  void expect_refused(const std::string& path, const std::string& what, int ndims = 0) {
    try {
      read_idx(path, ndims);
      ADD_FAILURE() << path << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
};

TEST_F(IdxReader, ReadsGzipAndPlainFilesExactly) {
  const Bytes data = counting(4 * 3 * 2);
  for (const std::string& path : {write_gz("a-idx3-ubyte.gz", idx_bytes({4, 3, 2}, data)),
                                  write_plain("a-idx3-ubyte", idx_bytes({4, 3, 2}, data))}) {
    IdxArray a = read_idx(path, 3);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{4, 3, 2})) << path;
    EXPECT_EQ(a.data, data) << path;
  }
}

TEST_F(IdxReader, ReadsDataLargerThanOneReadPiece) {
  const Bytes data = counting(3u << 20);  // several of the reader's 1 MiB pieces
  IdxArray a = read_idx(write_gz("big.gz", idx_bytes({3, 1024, 1024}, data)));
  EXPECT_EQ(a.data, data);
}

TEST_F(IdxReader, RefusesWrongMagicNumbers) {
  const Bytes data = counting(6);
  Bytes b = idx_bytes({6}, data);
  b[0] = 1;
  expect_refused(write_gz("m1.gz", b), "two zero bytes");
  expect_refused(write_gz("m2.gz", idx_bytes({6}, data, 0x0D)), "element type code 13");
  Bytes zero_dims = idx_bytes({6}, data);
  zero_dims[3] = 0;
  expect_refused(write_gz("m3.gz", zero_dims), "0 dimensions");
  expect_refused(write_gz("labels-as-images.gz", idx_bytes({6}, data)), "1 dimensions where 3", 3);
}

TEST_F(IdxReader, RefusesBadDimensions) {
  expect_refused(write_gz("zero.gz", idx_bytes({4, 0, 2}, {})), "dimension 1 is zero");
  // A lying header asking for 2^32^3 bytes must be refused, not allocated.
  expect_refused(write_gz("huge.gz", idx_bytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, counting(10))),
                 "more than 16 GiB");
}

TEST_F(IdxReader, RefusesTruncatedFiles) {
  const Bytes full = idx_bytes({10, 4}, counting(40));
  expect_refused(write_gz("empty.gz", {}), "shorter than the 4-byte magic");
  expect_refused(write_gz("header.gz", Bytes(full.begin(), full.begin() + 6)),
                 "inside the dimensions");
  expect_refused(write_gz("data.gz", Bytes(full.begin(), full.end() - 5)),
                 "truncated: the header announces 40 data bytes, the file holds 35");
  // A header claiming far more than the file holds: refused after reading what is there.
  expect_refused(write_gz("claims-more.gz", idx_bytes({1000000, 100}, counting(10))), "truncated");
}

TEST_F(IdxReader, RefusesTrailingBytes) {
  Bytes b = idx_bytes({5}, counting(5));
  b.push_back(9);
  expect_refused(write_gz("long.gz", b), "longer than its header announces");
}

TEST_F(IdxReader, RefusesACorruptGzipStream) {
  // Compress, then cut the compressed stream in half: zlib reports the damage.
  std::string good = write_gz("good.gz", idx_bytes({2000}, counting(2000)));
  std::ifstream in(good, std::ios::binary);
  Bytes compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  compressed.resize(compressed.size() / 2);
  std::string cut = write_plain("cut.gz", compressed);
  expect_refused(cut, "not a valid IDX file");
}

TEST_F(IdxReader, MissingFileIsNamed) { expect_refused(dir_ + "/nothing-here.gz", "no such file"); }

TEST(IdxReaderFashionMnist, ReadsTheInstalledTestLabels) {
  const std::string path = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " not installed (dataset-fashion-mnist)";
  IdxArray a = read_idx(path, 1);
  ASSERT_EQ(a.dims, std::vector<int64_t>{10000});
  std::vector<int> per_class(256, 0);
  for (uint8_t v : a.data) per_class[v]++;
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;  // balanced test set
}

}  // namespace
