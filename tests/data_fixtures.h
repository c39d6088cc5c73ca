// Small dataset files for the data tests, written with h5_writer. Every value is a function of its
// row, so a test can tell from a batch which rows it holds: pixel k of row r is pixel_value(r, k),
// the label of row r is r % classes, a regression target is target_value(r, j).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/data/h5_writer.h"

namespace lockstep::testing_util {

constexpr double kFixtureMean = 0.25, kFixtureStd = 0.5;

inline uint8_t pixel_value(int64_t row, int64_t k) {
  return static_cast<uint8_t>((row * 31 + k * 7) % 251);
}
inline float normalised_pixel(int64_t row, int64_t k) {
  return static_cast<float>((pixel_value(row, k) / 255.0 - kFixtureMean) / kFixtureStd);
}
inline float target_value(int64_t row, int64_t j) { return static_cast<float>(row) + 0.25f * j; }

struct ClassificationFixture {
  int64_t rows = 10;
  std::vector<int64_t> sample_shape = {3, 2, 1};
  int classes = 5;
  std::string group = "train";
  H5WriteOptions options;
  bool attributes = true;  // num_classes and normalisation on the file root
};

inline void write_classification(hid_t file, const ClassificationFixture& f) {
  int64_t sample = 1;
  for (int64_t d : f.sample_shape) sample *= d;
  std::vector<uint8_t> images(static_cast<size_t>(f.rows * sample));
  std::vector<uint8_t> labels(static_cast<size_t>(f.rows));
  for (int64_t r = 0; r < f.rows; ++r) {
    for (int64_t k = 0; k < sample; ++k)
      images[static_cast<size_t>(r * sample + k)] = pixel_value(r, k);
    labels[static_cast<size_t>(r)] = static_cast<uint8_t>(r % f.classes);
  }
  std::vector<int64_t> shape = {f.rows};
  shape.insert(shape.end(), f.sample_shape.begin(), f.sample_shape.end());
  H5WriteOptions label_options = f.options;
  if (!label_options.chunk.empty()) label_options.chunk = {f.options.chunk[0]};
  write_h5_dataset(file, f.group + "/images", shape, images, f.options);
  write_h5_dataset(file, f.group + "/labels", {f.rows}, labels, label_options);
  if (f.attributes) {
    write_h5_attr_int(file, "num_classes", f.classes);
    write_h5_attr_double(file, "norm_mean", kFixtureMean);
    write_h5_attr_double(file, "norm_std", kFixtureStd);
  }
}

inline std::string write_classification(const std::string& path, const ClassificationFixture& f) {
  H5Id file = create_h5_file(path);
  write_classification(file.get(), f);
  return path;
}

// Regression split: x (rows, features) float32 with x[r][j] = r * features + j, y (rows,) or
// (rows, targets) float32 from target_value.
inline std::string write_regression(const std::string& path, int64_t rows, int64_t features,
                                    int64_t targets, const std::string& group = "train") {
  std::vector<float> x(static_cast<size_t>(rows * features)),
      y(static_cast<size_t>(rows * targets));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < features; ++j)
      x[static_cast<size_t>(r * features + j)] = static_cast<float>(r * features + j);
    for (int64_t j = 0; j < targets; ++j)
      y[static_cast<size_t>(r * targets + j)] = target_value(r, j);
  }
  H5Id file = create_h5_file(path);
  write_h5_dataset(file.get(), group + "/x", {rows, features}, x);
  if (targets == 1)
    write_h5_dataset(file.get(), group + "/y", {rows}, y);
  else
    write_h5_dataset(file.get(), group + "/y", {rows, targets}, y);
  return path;
}

// Token split (lockstep-data text's layout): tokens (rows, T + 1) of type Id, token k of row r is
// token_value(r, k, vocab); vocab_size and seq_len on the dataset unless vocab is 0.
inline int64_t token_value(int64_t row, int64_t k, int64_t vocab) {
  return (row * 5 + k * 3) % vocab;
}

template <class Id>
std::string write_tokens(const std::string& path, int64_t rows, int64_t T, int64_t vocab,
                         const std::string& group = "train", bool attributes = true) {
  std::vector<Id> tokens(static_cast<size_t>(rows * (T + 1)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k <= T; ++k)
      tokens[static_cast<size_t>(r * (T + 1) + k)] = static_cast<Id>(token_value(r, k, vocab));
  H5Id file = std::filesystem::exists(path) ? open_h5_readwrite(path) : create_h5_file(path);
  write_h5_dataset(file.get(), group + "/tokens", {rows, T + 1}, tokens);
  if (attributes) {
    H5Id d(LS_CHECK_HDF5(H5Dopen2(file.get(), (group + "/tokens").c_str(), H5P_DEFAULT)));
    write_h5_attr_int(d.get(), "vocab_size", vocab);
    write_h5_attr_int(d.get(), "seq_len", T);
  }
  return path;
}

}  // namespace lockstep::testing_util
