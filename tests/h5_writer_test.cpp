// h5_writer and hdf5_util: datasets of every supported type round-trip with and without chunking
// and gzip, attributes of every kind round-trip and can be replaced, and failures are messages that
// name the file (never an HDF5 error-stack dump); close_h5_file empties its handle, and refuses a
// file that an open object would keep open.
#include "runtime/data/h5_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "runtime/base/error.h"
#include "runtime/data/hdf5_util.h"
#include "test_util.h"

using namespace lockstep;

namespace {

class H5Writer : public ::testing::Test {
 protected:
  std::string dir_ = testing_util::local_temp_dir("h5w");
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
};

template <class T>
std::vector<T> ramp(size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>((i * 5) % 97);
  return v;
}

template <class T>
void round_trip(hid_t file, const std::string& name, const H5WriteOptions& opt) {
  const std::vector<int64_t> shape = {40, 3, 5};
  const std::vector<T> data = ramp<T>(600);
  write_h5_dataset(file, name, shape, data, opt);
  EXPECT_EQ(h5_dataset_shape(file, name), shape) << name;
  std::vector<T> back(data.size());
  read_h5_dataset(file, name, dtype_of<T>(), back.data(), back.size());
  EXPECT_EQ(back, data) << name;
}

TEST_F(H5Writer, EveryTypeRoundTripsContiguousChunkedAndCompressed) {
  H5Id file = create_h5_file(path("types.h5"));
  H5WriteOptions contiguous, chunked, gzip;
  chunked.chunk = {7, 3, 5};
  gzip.gzip_level = 6;
  gzip.shuffle = true;
  int i = 0;
  for (const H5WriteOptions& opt : {contiguous, chunked, gzip}) {
    const std::string g = "g" + std::to_string(i++) + "/";
    round_trip<float>(file.get(), g + "f32", opt);
    round_trip<double>(file.get(), g + "f64", opt);
    round_trip<uint8_t>(file.get(), g + "u8", opt);
    round_trip<int32_t>(file.get(), g + "i32", opt);
    round_trip<int64_t>(file.get(), g + "i64", opt);
  }
  // The compressed copy really is smaller on disk (the data repeats).
  H5Id plain(H5Dopen2(file.get(), "g0/i64", H5P_DEFAULT)),
      packed(H5Dopen2(file.get(), "g2/i64", H5P_DEFAULT));
  EXPECT_LT(H5Dget_storage_size(packed.get()), H5Dget_storage_size(plain.get()) / 2);
}

TEST_F(H5Writer, ScalarAndEmptyDatasets) {
  H5Id file = create_h5_file(path("edge.h5"));
  const double pi = 3.25;
  write_h5_dataset(file.get(), "scalar", DType::f64, {}, &pi);
  EXPECT_TRUE(h5_dataset_shape(file.get(), "scalar").empty());
  double back = 0;
  read_h5_dataset(file.get(), "scalar", DType::f64, &back, 1);
  EXPECT_EQ(back, pi);
  H5WriteOptions gzip;
  gzip.gzip_level = 4;  // an empty dataset cannot be chunked: written contiguous instead
  write_h5_dataset(file.get(), "empty", DType::f32, {0, 4}, nullptr, gzip);
  EXPECT_EQ(h5_dataset_shape(file.get(), "empty"), (std::vector<int64_t>{0, 4}));
}

TEST_F(H5Writer, ReadingTheWrongCountIsRefused) {
  H5Id file = create_h5_file(path("count.h5"));
  write_h5_dataset(file.get(), "x", {10}, ramp<float>(10));
  std::vector<float> out(9);
  EXPECT_THROW(read_h5_dataset(file.get(), "x", DType::f32, out.data(), out.size()), UsageError);
  EXPECT_THROW(h5_dataset_shape(file.get(), "missing"), UsageError);
}

TEST_F(H5Writer, AttributesRoundTripAndReplace) {
  H5Id file = create_h5_file(path("attrs.h5"));
  H5Id group = ensure_h5_group(file.get(), "a/b");
  write_h5_attr_int(group.get(), "count", -12);
  write_h5_attr_double(group.get(), "rate", 0.125);
  write_h5_attr_doubles(group.get(), "w", {1.5, -2, 3});
  write_h5_attr_string(group.get(), "name", "Ankle boot");
  write_h5_attr_strings(group.get(), "names", {"T-shirt/top", "", "Bag"});
  EXPECT_EQ(read_h5_attr_int(group.get(), "count"), -12);
  EXPECT_EQ(read_h5_attr_double(group.get(), "count"), -12.0);  // any number reads as double
  EXPECT_EQ(read_h5_attr_double(group.get(), "rate"), 0.125);
  EXPECT_EQ(read_h5_attr_doubles(group.get(), "w"), (std::vector<double>{1.5, -2, 3}));
  EXPECT_EQ(read_h5_attr_string(group.get(), "name"), "Ankle boot");
  EXPECT_EQ(read_h5_attr_strings(group.get(), "names"),
            (std::vector<std::string>{"T-shirt/top", "", "Bag"}));
  EXPECT_FALSE(read_h5_attr_double(group.get(), "absent").has_value());
  EXPECT_FALSE(has_h5_attr(group.get(), "absent"));

  write_h5_attr_string(group.get(), "rate", "now a string");  // replacing changes the type
  EXPECT_EQ(read_h5_attr_string(group.get(), "rate"), "now a string");
  // The same group reopened by path (ensure_h5_group does not recreate it).
  H5Id again = ensure_h5_group(file.get(), "/a/b");
  EXPECT_EQ(read_h5_attr_int(again.get(), "count"), -12);
}

TEST_F(H5Writer, WrongAttributeKindsAreUsageErrorsNamingTheAttribute) {
  H5Id file = create_h5_file(path("kinds.h5"));
  write_h5_attr_string(file.get(), "norm_mean", "zero");
  write_h5_attr_doubles(file.get(), "two", {1, 2});
  write_h5_attr_double(file.get(), "half", 0.5);
  for (const auto& [name, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"norm_mean", [&] { read_h5_attr_double(file.get(), "norm_mean"); }},
           {"two", [&] { read_h5_attr_double(file.get(), "two"); }},
           {"half", [&] { read_h5_attr_int(file.get(), "half"); }},
           {"half", [&] { read_h5_attr_string(file.get(), "half"); }}}) {
    try {
      call();
      ADD_FAILURE() << name << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("attribute " + name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("kinds.h5"), std::string::npos) << e.what();
    }
  }
}

TEST_F(H5Writer, FixedLengthStringsFromOtherToolsAreRead) {
  H5Id file = create_h5_file(path("fixed.h5"));
  H5Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), 8);
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  hsize_t n = 2;
  H5Id space(H5Screate_simple(1, &n, nullptr));
  H5Id attr(H5Acreate2(file.get(), "labels", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char text[16] = {'c', 'a', 't', 0, 0, 0, 0, 0, 'e', 'i', 'g', 'h', 't', 'c', 'h', 'r'};
  ASSERT_GE(H5Awrite(attr.get(), type.get(), text), 0);
  EXPECT_EQ(read_h5_attr_strings(file.get(), "labels"),
            (std::vector<std::string>{"cat", "eightchr"}));
}

TEST_F(H5Writer, UnusableFilesAreNamedNotDumped) {
  // Missing folder, missing file, a text file, a truncated HDF5 file: UsageError naming the path.
  EXPECT_THROW(create_h5_file(path("no/such/folder/x.h5")), UsageError);
  std::ofstream(path("text.h5")) << "not hdf5\n";
  {
    H5Id file = create_h5_file(path("full.h5"));
    write_h5_dataset(file.get(), "x", {50000}, ramp<double>(50000));
  }
  std::filesystem::copy_file(path("full.h5"), path("cut.h5"));
  std::filesystem::resize_file(path("cut.h5"), std::filesystem::file_size(path("full.h5")) / 2);
  const std::pair<std::string, std::string> cases[] = {
      {"missing.h5", "no such file"}, {"text.h5", "not an HDF5 file"}, {"cut.h5", "truncated"}};
  for (const auto& [name, words] : cases) {
    testing::internal::CaptureStderr();
    try {
      open_h5_readonly(path(name));
      ADD_FAILURE() << name << " was opened";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(path(name)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "HDF5 printed its error stack";
  }
}

TEST_F(H5Writer, AFileOpenForWritingElsewhereIsNamedAsSuch) {
  // Not "damaged or truncated": HDF5's lock is held by a writer (an exclusive flock on another
  // descriptor of the file stands in for h5py's 'a' mode in another process).
  {
    H5Id file = create_h5_file(path("held.h5"));
    write_h5_dataset(file.get(), "x", {10}, ramp<float>(10));
  }
  const int fd = ::open(path("held.h5").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(0, ::flock(fd, LOCK_EX));
  try {
    open_h5_readonly(path("held.h5"));
    ADD_FAILURE() << "opened a file another holder has locked";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path("held.h5") + ": another process has it open for "
                                                           "writing"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("HDF5_USE_FILE_LOCKING=FALSE"), std::string::npos)
        << e.what();
  }
  // A reader's shared lock keeps a writer out, and the message says so.
  ASSERT_EQ(0, ::flock(fd, LOCK_SH));
  EXPECT_EQ(h5_dataset_shape(open_h5_readonly(path("held.h5")).get(), "x"),
            std::vector<int64_t>{10});
  try {
    open_h5_readwrite(path("held.h5"));
    ADD_FAILURE() << "opened a file another reader has locked for writing";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path("held.h5") + ": another process has it open ("),
              std::string::npos)
        << e.what();
  }
  ::close(fd);
  EXPECT_TRUE(open_h5_readwrite(path("held.h5")).valid());
}

TEST_F(H5Writer, CloseIsCheckedAndRefusesWhileAnObjectIsOpen) {
  // A clean close empties the handle and leaves a complete file.
  H5Id file = create_h5_file(path("closed.h5"));
  write_h5_dataset(file.get(), "x", {100}, ramp<float>(100));
  close_h5_file(file, path("closed.h5"));
  EXPECT_FALSE(file.valid());
  EXPECT_EQ(h5_dataset_shape(open_h5_readonly(path("closed.h5")).get(), "x"),
            std::vector<int64_t>{100});
  // An object still open would keep the file open past the close (and its write errors unseen).
  file = create_h5_file(path("open.h5"));
  write_h5_dataset(file.get(), "x", {100}, ramp<float>(100));
  H5Id dset;
  {
    Hdf5Lock lock;
    dset = H5Id(LS_CHECK_HDF5(H5Dopen2(file.get(), "x", H5P_DEFAULT)));
  }
  try {
    close_h5_file(file, path("open.h5"));
    ADD_FAILURE() << "closed with a dataset open";
  } catch (const UsageError&) {
    ADD_FAILURE() << "a failed close is Error, not UsageError";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("writing " + path("open.h5") + " failed: 1 HDF5 object(s) still open"),
              std::string::npos)
        << text;
  }
  EXPECT_FALSE(file.valid());
}

TEST_F(H5Writer, CheckMacroReportsTheCallAndHdf5sReason) {
  Hdf5Lock lock;
  try {
    LS_CHECK_HDF5(H5Gopen2(H5I_INVALID_HID, "nowhere", H5P_DEFAULT));
    ADD_FAILURE() << "no throw";
  } catch (const UsageError&) {
    ADD_FAILURE() << "a library failure must be Error, not UsageError";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("H5Gopen2"), std::string::npos) << text;
    EXPECT_NE(text.find("h5_writer_test.cpp"), std::string::npos) << text;
    EXPECT_NE(text.find("hint"), std::string::npos) << text;
  }
}

}  // namespace
