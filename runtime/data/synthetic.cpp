#include "runtime/data/synthetic.h"

#include <random>
#include <utility>
#include <vector>

#include "runtime/data/h5_writer.h"
#include "runtime/data/hdf5_util.h"

namespace lockstep {

void write_synthetic_images(const std::string& path, int64_t train_rows, int64_t test_rows) {
  H5Id file = create_h5_file(path);
  std::mt19937 gen(7);
  for (auto [group, n] :
       {std::pair<std::string, int64_t>{"train", train_rows}, {"test", test_rows}}) {
    std::vector<uint8_t> images(static_cast<size_t>(n) * 28 * 28), labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(gen() % 10);
      for (int p = 0; p < 28 * 28; ++p)
        images[i * 784 + p] = static_cast<uint8_t>((gen() % 128) + (p % 10 == labels[i] ? 127 : 0));
    }
    write_h5_dataset(file.get(), group + "/images", {n, 28, 28, 1}, images);
    write_h5_dataset(file.get(), group + "/labels", {n}, labels);
  }
  write_h5_attr_int(file.get(), "num_classes", 10);
  write_h5_attr_double(file.get(), "norm_mean", 0.5);
  write_h5_attr_double(file.get(), "norm_std", 0.25);
  close_h5_file(file, path);
}

void write_synthetic_tokens(const std::string& path, int64_t train_rows, int64_t test_rows,
                            int seq_len, int vocab) {
  H5Id file = create_h5_file(path);
  std::mt19937 gen(7);
  const int T = seq_len;
  for (auto [group, n] :
       {std::pair<std::string, int64_t>{"train", train_rows}, {"test", test_rows}}) {
    const size_t count = static_cast<size_t>(n) * (T + 1);
    if (vocab <= 256) {
      std::vector<uint8_t> tokens(count);
      for (uint8_t& t : tokens) t = static_cast<uint8_t>(gen() % vocab);
      write_h5_dataset(file.get(), group + "/tokens", {n, T + 1}, tokens);
    } else {
      std::vector<int32_t> tokens(count);
      for (int32_t& t : tokens) t = static_cast<int32_t>(gen() % static_cast<unsigned>(vocab));
      write_h5_dataset(file.get(), group + "/tokens", {n, T + 1}, tokens);
    }
    H5Id d(LS_CHECK_HDF5(H5Dopen2(file.get(), (group + "/tokens").c_str(), H5P_DEFAULT)));
    write_h5_attr_int(d.get(), "vocab_size", vocab);
    write_h5_attr_int(d.get(), "seq_len", T);
  }
  close_h5_file(file, path);
}

}  // namespace lockstep
