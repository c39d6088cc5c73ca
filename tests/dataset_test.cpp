// inspect_dataset and DatasetReader: what a file describes (rows, shapes, classes, normalisation),
// the rows read back converted and normalised, files written the way h5py writes them, and one
// clear UsageError for each way a file can be unusable.
#include "runtime/data/dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "data_fixtures.h"
#include "runtime/base/error.h"
#include "runtime/data/h5_writer.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::testing_util;

namespace {

class Dataset : public ::testing::Test {
 protected:
  std::string dir_ = local_temp_dir("dataset");
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // inspect_dataset refuses `spec` with a UsageError containing every one of `words`.
  void expect_refused(const DatasetSpec& spec, const std::vector<std::string>& words) {
    try {
      inspect_dataset(spec);
      ADD_FAILURE() << spec.path << " was accepted";
    } catch (const UsageError& e) {
      for (const auto& w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  }
  DatasetSpec spec_of(const std::string& file, const std::string& group = "train") const {
    DatasetSpec s;
    s.path = file;
    s.group = group;
    return s;
  }
};

TEST_F(Dataset, DescribesAClassificationSplit) {
  ClassificationFixture f;
  f.rows = 12;
  f.sample_shape = {4, 3, 2};
  f.classes = 7;
  DatasetInfo info = inspect_dataset(spec_of(write_classification(path("c.h5"), f)));
  EXPECT_EQ(info.x_name, "images");
  EXPECT_EQ(info.y_name, "labels");
  EXPECT_EQ(info.rows, 12);
  EXPECT_EQ(info.sample_shape, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(info.sample_size, 24);
  EXPECT_TRUE(info.classification);
  EXPECT_EQ(info.num_classes, 7);  // from the attribute, although the labels only reach 6
  EXPECT_FLOAT_EQ(info.norm_mean, kFixtureMean);
  EXPECT_FLOAT_EQ(info.norm_std, kFixtureStd);
  EXPECT_FLOAT_EQ(info.norm_scale, 1.0f / 255);
  EXPECT_EQ(info.x_type, "uint8");
  EXPECT_EQ(info.y_type, "uint8");
}

TEST_F(Dataset, WithoutAttributesClassesComeFromTheLabelsAndNoNormalisation) {
  ClassificationFixture f;
  f.rows = 4;  // labels 0..3 of 5 classes: the largest label decides
  f.attributes = false;
  DatasetInfo info = inspect_dataset(spec_of(write_classification(path("bare.h5"), f)));
  EXPECT_EQ(info.num_classes, 4);
  EXPECT_FLOAT_EQ(info.norm_mean, 0);
  EXPECT_FLOAT_EQ(info.norm_std, 1);
  EXPECT_FLOAT_EQ(info.norm_scale, 1.0f / 255);  // uint8 images still come out in [0, 1]
}

TEST_F(Dataset, DescribesRegressionSplitsAndCustomNames) {
  DatasetInfo one = inspect_dataset(spec_of(write_regression(path("r1.h5"), 9, 3, 1)));
  EXPECT_FALSE(one.classification);
  EXPECT_EQ(one.x_name, "x");
  EXPECT_EQ(one.y_name, "y");
  EXPECT_EQ(one.sample_shape, std::vector<int64_t>{3});
  EXPECT_EQ(one.target_dim, 1);
  EXPECT_FLOAT_EQ(one.norm_scale, 1.0f);
  DatasetInfo two = inspect_dataset(spec_of(write_regression(path("r2.h5"), 9, 3, 2)));
  EXPECT_EQ(two.target_dim, 2);

  // Top-level datasets with other names, as a user's own file might have them.
  {
    H5Id file = create_h5_file(path("names.h5"));
    write_h5_dataset(file.get(), "features", {5, 2}, std::vector<double>(10, 1.0));
    write_h5_dataset(file.get(), "price", {5}, std::vector<double>(5, 2.0));
  }
  DatasetSpec s = spec_of(path("names.h5"), "/");
  s.x_name = "features";
  s.y_name = "price";
  DatasetInfo named = inspect_dataset(s);
  EXPECT_EQ(named.rows, 5);
  EXPECT_EQ(named.x_type, "float64");

  // Inputs named otherwise (--x-name) find whichever targets the group holds, labels first (before:
  // y whenever x was not "images", so a group of pix and labels was refused for want of y).
  {
    H5Id file = create_h5_file(path("pix.h5"));
    write_h5_dataset(file.get(), "withlabels/pix", {4, 2}, std::vector<uint8_t>(8, 1));
    write_h5_dataset(file.get(), "withlabels/labels", {4}, std::vector<uint8_t>{0, 1, 2, 1});
    write_h5_dataset(file.get(), "withy/pix", {4, 2}, std::vector<float>(8, 1.0f));
    write_h5_dataset(file.get(), "withy/y", {4}, std::vector<float>(4, 0.5f));
  }
  DatasetSpec pix = spec_of(path("pix.h5"), "withlabels");
  pix.x_name = "pix";
  EXPECT_EQ(inspect_dataset(pix).y_name, "labels");
  EXPECT_TRUE(inspect_dataset(pix).classification);
  pix.group = "withy";
  EXPECT_EQ(inspect_dataset(pix).y_name, "y");
  EXPECT_FALSE(inspect_dataset(pix).classification);
}

// num_classes on the labels dataset itself (where h5py users put it) counts, as on the inputs, the
// group or the root (before: ignored there, and float labels trained as a regression).
TEST_F(Dataset, NumClassesOnTheLabelsCounts) {
  {
    H5Id file = create_h5_file(path("lab.h5"));
    write_h5_dataset(file.get(), "train/x", {4, 2}, std::vector<float>(8, 1.0f));
    write_h5_dataset(file.get(), "train/y", {4}, std::vector<float>{0, 1, 2, 1});
    H5Id y(H5Dopen2(file.get(), "train/y", H5P_DEFAULT));
    write_h5_attr_double(y.get(), "num_classes", 5);
  }
  const DatasetInfo info = inspect_dataset(spec_of(path("lab.h5")));
  EXPECT_TRUE(info.classification);
  EXPECT_EQ(info.num_classes, 5);
}

TEST_F(Dataset, ReaderConvertsRowsInAnyOrderWithRepeats) {
  ClassificationFixture f;
  f.rows = 50;
  f.options.chunk = {8, 3, 2, 1};
  f.options.gzip_level = 3;
  DatasetReader reader(spec_of(write_classification(path("rows.h5"), f)));
  const std::vector<int64_t> ids = {41, 3, 4, 5, 49, 3, 0};
  const size_t sample = 6;
  std::vector<float> x(ids.size() * sample);
  std::vector<int32_t> labels(ids.size());
  reader.read_rows(ids.data(), ids.size(), x.data(), labels.data(), nullptr);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(labels[i], ids[i] % f.classes) << "row " << ids[i];
    for (size_t k = 0; k < sample; ++k)
      EXPECT_NEAR(x[i * sample + k], normalised_pixel(ids[i], static_cast<int64_t>(k)), 1e-6)
          << ids[i];
  }
  // Six distinct rows of 6 image bytes and 1 label byte each.
  EXPECT_EQ(reader.bytes_read(), 6u * 7u);
}

TEST_F(Dataset, ReaderReadsRegressionTargets) {
  DatasetReader reader(spec_of(write_regression(path("r.h5"), 20, 4, 3)));
  const std::vector<int64_t> ids = {19, 0, 7};
  std::vector<float> x(ids.size() * 4), t(ids.size() * 3);
  reader.read_rows(ids.data(), ids.size(), x.data(), nullptr, t.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(x[i * 4 + j], static_cast<float>(ids[i] * 4 + j));
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(t[i * 3 + j], target_value(ids[i], j));
  }
}

// lockstep-predict's reading: the inputs alone, from a split that has no targets, converted as a
// split with them would be; without inputs_only such a split is refused naming the dataset.
TEST_F(Dataset, InputsOnlyReadsASplitWithoutTargets) {
  ClassificationFixture f;
  f.rows = 9;
  write_classification(path("full.h5"), f);
  {
    H5Id file = create_h5_file(path("bare.h5"));
    std::vector<uint8_t> images(static_cast<size_t>(f.rows) * 6);
    for (int64_t r = 0; r < f.rows; ++r)
      for (int64_t k = 0; k < 6; ++k) images[static_cast<size_t>(r * 6 + k)] = pixel_value(r, k);
    write_h5_dataset(file.get(), "train/images", {f.rows, 3, 2, 1}, images);
    for (const char* name : {"norm_mean", "norm_std"})
      write_h5_attr_double(file.get(), name, name[5] == 'm' ? kFixtureMean : kFixtureStd);
  }
  expect_refused(spec_of(path("bare.h5")), {"train/labels", "no such dataset"});
  DatasetSpec bare = spec_of(path("bare.h5")), full = spec_of(path("full.h5"));
  bare.inputs_only = full.inputs_only = true;
  DatasetReader a(bare), b(full);
  EXPECT_FALSE(a.info().has_targets);
  EXPECT_FALSE(b.info().has_targets);
  EXPECT_EQ(a.info().rows, 9);
  const std::vector<int64_t> ids = {8, 0, 4};
  std::vector<float> xa(ids.size() * 6), xb(ids.size() * 6);
  a.read_rows(ids.data(), ids.size(), xa.data(), nullptr, nullptr);
  b.read_rows(ids.data(), ids.size(), xb.data(), nullptr, nullptr);
  EXPECT_EQ(xa, xb);
  EXPECT_NEAR(xa[6], normalised_pixel(0, 0), 1e-6);
}

// A NaN or an infinity in float inputs or regression targets (also a float64 beyond float32's
// range) is refused when its row is read, naming the dataset and the row; nothing reads it as NaN.
TEST_F(Dataset, NonFiniteInputsAndTargetsAreRefusedNamingTheRow) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  {
    H5Id file = create_h5_file(path("nan.h5"));
    std::vector<float> x(6 * 2, 1.0f), y(6, 0.5f), ty(6 * 2, 0.5f);
    x[3 * 2 + 1] = nan;  // row 3, value 1
    write_h5_dataset(file.get(), "x_nan/x", {6, 2}, x);
    write_h5_dataset(file.get(), "x_nan/y", {6}, y);
    std::vector<float> ok(6 * 2, 1.0f);
    ty[4 * 2] = -inf;  // row 4, value 0
    write_h5_dataset(file.get(), "y_inf/x", {6, 2}, ok);
    write_h5_dataset(file.get(), "y_inf/y", {6, 2}, ty);
    std::vector<double> big(6 * 2, 1.0);
    big[5 * 2] = 1e300;  // finite as a double, not as a float
    write_h5_dataset(file.get(), "x_big/x", {6, 2}, big);
    write_h5_dataset(file.get(), "x_big/y", {6}, y);
  }
  auto refusal = [&](const std::string& group, int64_t row) {
    DatasetReader reader(spec_of(path("nan.h5"), group));
    std::vector<float> x(2), t(2);
    const int64_t fine = 0;
    reader.read_rows(&fine, 1, x.data(), nullptr, t.data());  // another row reads
    return usage_message([&] { reader.read_rows(&row, 1, x.data(), nullptr, t.data()); });
  };
  const std::string x_nan = refusal("x_nan", 3);
  EXPECT_NE(x_nan.find("x_nan/x: row 3, value 1 is nan"), std::string::npos) << x_nan;
  const std::string y_inf = refusal("y_inf", 4);
  EXPECT_NE(y_inf.find("y_inf/y: row 4, value 0 is -inf"), std::string::npos) << y_inf;
  const std::string x_big = refusal("x_big", 5);
  EXPECT_NE(x_big.find("x_big/x: row 5, value 0 is inf"), std::string::npos) << x_big;
}

// A file as h5py writes it from numpy arrays: float64 images in [0, 1] (chunked, gzip), int64
// labels, attributes on the dataset itself. Written here with the raw HDF5 C API.
TEST_F(Dataset, ReadsAnH5pyStyleFile) {
  const hsize_t rows = 30;
  std::vector<double> images(rows * 2 * 2);
  std::vector<int64_t> labels(rows);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<double>(i) / images.size();
  for (size_t r = 0; r < rows; ++r) labels[r] = static_cast<int64_t>((r * 3) % 4);
  {
    hid_t file = H5Fcreate(path("h5py.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t group = H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[3] = {rows, 2, 2}, chunk[3] = {7, 2, 2};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    H5Pset_deflate(dcpl, 4);
    hid_t x = H5Dcreate2(group, "images", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(x, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data()), 0);
    const double mean = 0.5, stddev = 0.25;
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t a1 = H5Acreate2(x, "norm_mean", H5T_IEEE_F32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a1, H5T_NATIVE_DOUBLE, &mean);
    hid_t a2 = H5Acreate2(x, "norm_std", H5T_IEEE_F32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a2, H5T_NATIVE_DOUBLE, &stddev);
    hid_t lspace = H5Screate_simple(1, &rows, nullptr);
    hid_t y =
        H5Dcreate2(group, "labels", H5T_STD_I64LE, lspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(y, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()), 0);
    for (hid_t id : {a1, a2}) H5Aclose(id);
    for (hid_t id : {x, y}) H5Dclose(id);
    for (hid_t id : {space, lspace, scalar}) H5Sclose(id);
    H5Pclose(dcpl);
    H5Gclose(group);
    H5Fclose(file);
  }
  DatasetReader reader(spec_of(path("h5py.h5")));
  const DatasetInfo& info = reader.info();
  EXPECT_EQ(info.x_type, "float64");
  EXPECT_EQ(info.y_type, "int64");
  EXPECT_EQ(info.num_classes, 4);
  EXPECT_EQ(info.sample_shape, (std::vector<int64_t>{2, 2}));
  EXPECT_FLOAT_EQ(info.norm_scale, 1.0f);  // float images are taken as they are
  const std::vector<int64_t> ids = {29, 0, 14, 15, 16};
  std::vector<float> x(ids.size() * 4);
  std::vector<int32_t> got(ids.size());
  reader.read_rows(ids.data(), ids.size(), x.data(), got.data(), nullptr);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got[i], labels[static_cast<size_t>(ids[i])]);
    for (size_t k = 0; k < 4; ++k)
      EXPECT_NEAR(x[i * 4 + k], (images[static_cast<size_t>(ids[i]) * 4 + k] - 0.5) / 0.25, 1e-5);
  }
}

TEST_F(Dataset, OtherIntegerWidthsAreLabelsAndImages) {
  {
    H5Id file = create_h5_file(path("widths.h5"));
    H5Id group = ensure_h5_group(file.get(), "train");
    const int16_t img[6] = {-3, 0, 5, 300, 7, 9};
    const int8_t lab[3] = {2, 0, 1};
    hsize_t idims[2] = {3, 2}, ldims = 3;
    H5Id is(H5Screate_simple(2, idims, nullptr)), ls(H5Screate_simple(1, &ldims, nullptr));
    H5Id x(H5Dcreate2(group.get(), "images", H5T_STD_I16BE, is.get(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT));
    H5Id y(H5Dcreate2(group.get(), "labels", H5T_STD_I8LE, ls.get(), H5P_DEFAULT, H5P_DEFAULT,
                      H5P_DEFAULT));
    ASSERT_GE(H5Dwrite(x.get(), H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, img), 0);
    ASSERT_GE(H5Dwrite(y.get(), H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab), 0);
  }
  DatasetReader reader(spec_of(path("widths.h5")));
  const int64_t ids[3] = {2, 1, 0};
  float x[6];
  int32_t y[3];
  reader.read_rows(ids, 3, x, y, nullptr);
  EXPECT_EQ((std::vector<float>(x, x + 6)), (std::vector<float>{7, 9, 5, 300, -3, 0}));
  EXPECT_EQ((std::vector<int32_t>(y, y + 3)), (std::vector<int32_t>{1, 0, 2}));
}

TEST_F(Dataset, MissingUnreadableAndTruncatedFilesAreRefused) {
  expect_refused(spec_of(path("absent.h5")), {"absent.h5", "no such file"});
  std::ofstream(path("text.h5")) << "x,y\n1,2\n";
  expect_refused(spec_of(path("text.h5")), {"text.h5", "not an HDF5 file"});
  ClassificationFixture f;
  f.rows = 2000;
  write_classification(path("whole.h5"), f);
  std::filesystem::copy_file(path("whole.h5"), path("cut.h5"));
  std::filesystem::resize_file(path("cut.h5"),
                               std::filesystem::file_size(path("whole.h5")) * 2 / 3);
  expect_refused(spec_of(path("cut.h5")), {"cut.h5", "truncated"});
}

TEST_F(Dataset, MissingGroupsAndDatasetsAreNamed) {
  ClassificationFixture f;
  const std::string file = write_classification(path("c.h5"), f);
  expect_refused(spec_of(file, "validation"), {"c.h5", "no group 'validation'", "train"});
  DatasetSpec s = spec_of(file);
  s.x_name = "pixels";
  expect_refused(s, {"train/pixels", "no such dataset", "images, labels"});
  s = spec_of(file);
  s.y_name = "classes";
  expect_refused(s, {"train/classes", "no such dataset"});
  {
    H5Id other = create_h5_file(path("none.h5"));
    write_h5_dataset(other.get(), "train/data", {3}, std::vector<float>(3));
  }
  expect_refused(spec_of(path("none.h5")), {"no dataset 'images' or 'x'", "data"});
}

TEST_F(Dataset, InconsistentShapesAndEmptySplitsAreRefused) {
  {
    H5Id file = create_h5_file(path("shapes.h5"));
    write_h5_dataset(file.get(), "count/images", {5, 2}, std::vector<uint8_t>(10));
    write_h5_dataset(file.get(), "count/labels", {4}, std::vector<uint8_t>(4));
    write_h5_dataset(file.get(), "empty/images", DType::u8, {0, 2}, nullptr);
    write_h5_dataset(file.get(), "empty/labels", DType::u8, {0}, nullptr);
    write_h5_dataset(file.get(), "wide/images", {3, 2}, std::vector<uint8_t>(6));
    write_h5_dataset(file.get(), "wide/labels", {3, 2}, std::vector<int32_t>(6));
    write_h5_dataset(file.get(), "scalar/x", DType::f32, {}, std::vector<float>{1}.data());
    write_h5_dataset(file.get(), "scalar/y", {1}, std::vector<float>{1});
  }
  const std::string file = path("shapes.h5");
  expect_refused(spec_of(file, "count"), {"count/images has 5 rows but labels has 4"});
  expect_refused(spec_of(file, "empty"), {"empty/images", "is empty"});
  expect_refused(spec_of(file, "wide"), {"wide/labels", "(3, 2)", "(N,) labels"});
  expect_refused(spec_of(file, "scalar"), {"scalar/x", "scalar"});
}

TEST_F(Dataset, BadLabelsAndAttributesAreRefusedBeforeTraining) {
  {
    H5Id file = create_h5_file(path("labels.h5"));
    write_h5_dataset(file.get(), "neg/images", {3, 1}, std::vector<uint8_t>(3));
    write_h5_dataset(file.get(), "neg/labels", {3}, std::vector<int32_t>{0, -1, 2});
    write_h5_dataset(file.get(), "high/images", {3, 1}, std::vector<uint8_t>(3));
    write_h5_dataset(file.get(), "high/labels", {3}, std::vector<int32_t>{0, 10, 2});
    write_h5_attr_int(file.get(), "num_classes", 10);
    write_h5_dataset(file.get(), "strings/images", {3, 1}, std::vector<uint8_t>(3));
    write_h5_dataset(file.get(), "strings/labels", {3}, std::vector<uint8_t>(3));
    H5Id strings = ensure_h5_group(file.get(), "strings");
    write_h5_attr_string(strings.get(), "norm_std", "one");
    write_h5_dataset(file.get(), "zero/images", {3, 1}, std::vector<uint8_t>(3));
    write_h5_dataset(file.get(), "zero/labels", {3}, std::vector<uint8_t>(3));
    H5Id zero = ensure_h5_group(file.get(), "zero");
    write_h5_attr_double(zero.get(), "norm_std", 0.0);
  }
  const std::string file = path("labels.h5");
  expect_refused(spec_of(file, "neg"), {"neg/labels", "negative label (-1)"});
  expect_refused(spec_of(file, "high"), {"high/labels", "label 10", "num_classes is 10"});
  expect_refused(spec_of(file, "strings"), {"attribute norm_std", "not a number"});
  expect_refused(spec_of(file, "zero"), {"norm_std > 0"});
}

TEST_F(Dataset, SampleShapeMustFitTheModel) {
  DatasetInfo info;
  info.path = "f.h5";
  info.group = "train";
  info.x_name = "images";
  info.sample_shape = {28, 28, 1};
  EXPECT_NO_THROW(check_sample_shape(info, {28, 28, 1}));
  EXPECT_NO_THROW(check_sample_shape(info, {28, 28}));
  try {
    check_sample_shape(info, {32, 32, 3});
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("f.h5: train/images"), std::string::npos) << text;
    EXPECT_NE(text.find("(28, 28, 1)"), std::string::npos) << text;
    EXPECT_NE(text.find("(32, 32, 3)"), std::string::npos) << text;
  }
}

}  // namespace

// The label rule (dataset.h): float targets with num_classes are class labels when they are whole
// numbers, refused (naming --loss) when they are not; --loss decides when asked.
TEST_F(Dataset, FloatLabelsFollowTheLabelRule) {
  {
    H5Id file = create_h5_file(path("float_labels.h5"));
    write_h5_dataset(file.get(), "whole/x", {4, 2}, std::vector<float>(8, 0.5f));
    write_h5_dataset(file.get(), "whole/y", {4}, std::vector<float>{0, 2, 1, 2});
    write_h5_dataset(file.get(), "half/x", {4, 2}, std::vector<float>(8, 0.5f));
    write_h5_dataset(file.get(), "half/y", {4}, std::vector<float>{0, 2.5f, 1, 2});
    write_h5_attr_int(file.get(), "num_classes", 3);
    write_h5_dataset(file.get(), "onehot/x", {2, 2}, std::vector<float>(4, 0.5f));
    write_h5_dataset(file.get(), "onehot/y", {2, 3}, std::vector<float>{1, 0, 0, 0, 1, 0});
  }
  const std::string file = path("float_labels.h5");
  DatasetInfo whole = inspect_dataset(spec_of(file, "whole"));
  EXPECT_TRUE(whole.classification) << "float whole numbers with num_classes are class labels";
  EXPECT_EQ(whole.num_classes, 3);
  EXPECT_FALSE(inspect_dataset(spec_of(file, "onehot")).classification)
      << "(N, K) rows stay values";
  expect_refused(spec_of(file, "half"), {"half/y", "holds 2.5 at row 1", "--loss mse"});

  DatasetSpec values = spec_of(file, "half");
  values.targets = TargetKind::values;  // --loss mse
  EXPECT_FALSE(inspect_dataset(values).classification);
  DatasetSpec labels = spec_of(file, "half");
  labels.targets = TargetKind::labels;  // --loss cross-entropy
  expect_refused(labels, {"holds 2.5", "--loss cross-entropy needs labels"});

  DatasetReader reader(spec_of(file, "whole"));
  const int64_t ids[] = {1, 3};
  float x[4];
  int32_t got[2] = {-1, -1};
  reader.read_rows(ids, 2, x, got, nullptr);
  EXPECT_EQ(got[0], 2);
  EXPECT_EQ(got[1], 2);
}

// A token split (lockstep-data text): T inputs per row, the ids themselves as floats, and the
// next token at each position as its label; the class count is the vocabulary.
TEST_F(Dataset, TokenSplitsGiveTokensAndTheNextTokenAsLabels) {
  const int64_t T = 6, vocab = 11;
  const std::string file = write_tokens<int32_t>(path("t.h5"), 9, T, vocab);
  const DatasetInfo info = inspect_dataset(spec_of(file));
  EXPECT_EQ(info.x_name, "tokens");
  EXPECT_EQ(info.rows, 9);
  EXPECT_EQ(info.positions, T);
  EXPECT_EQ(info.sample_shape, (std::vector<int64_t>{T}));
  EXPECT_EQ(info.sample_size, T);
  EXPECT_TRUE(info.classification);
  EXPECT_EQ(info.num_classes, vocab);

  DatasetReader reader(spec_of(file));
  const std::vector<int64_t> ids = {8, 2, 3, 2};
  std::vector<float> x(ids.size() * T);
  std::vector<int32_t> labels(ids.size() * T);
  reader.read_rows(ids.data(), ids.size(), x.data(), labels.data(), nullptr);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t k = 0; k < T; ++k) {
      EXPECT_EQ(x[i * T + k], static_cast<float>(token_value(ids[i], k, vocab))) << ids[i];
      EXPECT_EQ(labels[i * T + k], token_value(ids[i], k + 1, vocab)) << ids[i];
    }
  EXPECT_EQ(reader.bytes_read(), 3u * (T + 1) * sizeof(int32_t));  // three distinct rows
}

TEST_F(Dataset, Uint8TokensWithoutAttributesAreBytes) {
  const std::string file = write_tokens<uint8_t>(path("bytes.h5"), 4, 3, 256, "train", false);
  const DatasetInfo info = inspect_dataset(spec_of(file));
  EXPECT_EQ(info.num_classes, 256);
  EXPECT_EQ(info.positions, 3);
  DatasetReader reader(spec_of(file));
  const int64_t id = 3;
  std::vector<float> x(3);
  std::vector<int32_t> labels(3);
  reader.read_rows(&id, 1, x.data(), labels.data(), nullptr);
  EXPECT_EQ(x[2], static_cast<float>(token_value(3, 2, 256)));  // not scaled by 1/255
  EXPECT_EQ(labels[2], token_value(3, 3, 256));
}

TEST_F(Dataset, TokenSplitsOutsideTheirVocabularyOrNamedOtherwiseAreRefused) {
  const std::string file = path("bad.h5");
  write_tokens<int32_t>(file, 5, 4, 20, "over");
  {
    H5Id f = open_h5_readwrite(file);
    H5Id d(LS_CHECK_HDF5(H5Dopen2(f.get(), "over/tokens", H5P_DEFAULT)));
    write_h5_attr_int(d.get(), "vocab_size", 12);  // the tokens reach 19
  }
  write_tokens<int64_t>(file, 3, 2, 7, "bare", false);
  write_tokens<uint8_t>(file, 3, 2, 7, "ok");
  expect_refused(spec_of(file, "over"), {"over/tokens", "outside the vocabulary [0, 12)"});
  expect_refused(spec_of(file, "bare"), {"bare/tokens", "int64", "vocab_size"});
  DatasetSpec named = spec_of(file, "ok");
  named.x_name = "images";
  expect_refused(named, {"ok/tokens", "token split", "--x-name", "'images'"});
  named.x_name = "tokens";
  named.y_name = "labels";
  expect_refused(named, {"token split", "--y-name", "'labels'"});
  named.y_name = "tokens";
  EXPECT_EQ(inspect_dataset(named).positions, 2);
}
