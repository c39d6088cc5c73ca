// A dataset split in an HDF5 file (DESIGN.md, data format): one group per split ("train", "test")
// holding the inputs and the targets.
//   classification: <group>/images (N, H, W, C) uint8 or float, <group>/labels (N,) any integer type;
//                   attributes num_classes, norm_mean, norm_std (on the file root or the group)
//   regression:     <group>/x (N, D) float, <group>/y (N,) or (N, K) float
// inspect_dataset opens the file read-only, checks it and describes it; every problem is a
// UsageError naming the file, the dataset and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

struct DatasetSpec {
  std::string path;
  std::string group = "train";
  std::string x_name;  // empty: "images" if present, else "x"
  std::string y_name;  // empty: "labels" if x is "images", else "y"
};

struct DatasetInfo {
  std::string path, group, x_name, y_name;
  int64_t rows = 0;
  std::vector<int64_t> sample_shape;  // x's dimensions after the first, e.g. {28, 28, 1} or {D}
  int64_t sample_size = 0;            // product of sample_shape
  bool classification = true;         // integer targets (labels) vs float targets
  int num_classes = 0;                // classification: from the attribute, else max label + 1
  int target_dim = 1;                 // regression: K (1 for a (N,) target)
  float norm_mean = 0.0f;             // x is converted to (x * norm_scale - norm_mean) / norm_std
  float norm_std = 1.0f;
  float norm_scale = 1.0f;            // 1/255 for uint8 images, 1 for float
  std::string x_type, y_type;         // file types in words, for messages and inspect
};

DatasetInfo inspect_dataset(const DatasetSpec& spec);

}  // namespace lockstep
