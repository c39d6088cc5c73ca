// lockstep-data fashion-mnist: the four IDX files of Debian's dataset-fashion-mnist package into
// one HDF5 file with train/ and test/ splits (images uint8 (N, 28, 28, 1), labels uint8 (N,)),
// chunked and gzip-compressed, with num_classes, class_names and the training set's
// normalisation (norm_scale, norm_mean, norm_std) as attributes of the file root.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/data_commands.h"
#include "runtime/base/error.h"
#include "runtime/data/h5_writer.h"
#include "runtime/data/idx_reader.h"

namespace lockstep::data {
namespace {

namespace po = boost::program_options;

constexpr const char* kDefaultSource = "/usr/share/datasets/fashion-mnist";
constexpr int kClasses = 10;
const char* const kClassNames[kClasses] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                           "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                           "Bag",         "Ankle boot"};

// The package ships *.gz; an unpacked copy (no .gz) is read too.
std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    std::filesystem::path p = std::filesystem::path(dir) / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  throw UsageError(dir + ": no " + stem +
                   ".gz (install Debian's dataset-fashion-mnist package, or "
                   "point --source at a folder holding the four Fashion-MNIST IDX files)");
}

// A split's two IDX files, found before anything is read or written.
struct SplitFiles {
  std::string images_path, labels_path;
};

SplitFiles find_split(const std::string& dir, const std::string& prefix) {
  return {find_idx(dir, prefix + "-images-idx3-ubyte"),
          find_idx(dir, prefix + "-labels-idx1-ubyte")};
}

struct Split {
  IdxArray images, labels;
  std::string images_path;
};

Split load_split(const SplitFiles& files) {
  Split s;
  s.images_path = files.images_path;
  const std::string& labels_path = files.labels_path;
  s.images = read_idx(s.images_path, 3);
  s.labels = read_idx(labels_path, 1);
  if (s.images.dims[1] != 28 || s.images.dims[2] != 28)
    throw UsageError(s.images_path + ": images are " + std::to_string(s.images.dims[1]) + "x" +
                     std::to_string(s.images.dims[2]) + ", Fashion-MNIST's are 28x28");
  if (s.labels.dims[0] != s.images.dims[0])
    throw UsageError(labels_path + ": " + std::to_string(s.labels.dims[0]) + " labels for the " +
                     std::to_string(s.images.dims[0]) + " images of " + s.images_path);
  for (size_t i = 0; i < s.labels.data.size(); ++i)
    if (s.labels.data[i] >= kClasses)
      throw UsageError(labels_path + ": label " + std::to_string(s.labels.data[i]) + " at row " +
                       std::to_string(i) + " is not a Fashion-MNIST class (0 to 9)");
  return s;
}

void write_split(hid_t file, const std::string& group, const Split& s, const H5WriteOptions& opt) {
  const int64_t n = s.images.dims[0];
  H5WriteOptions image_opt = opt, label_opt = opt;
  std::vector<int64_t> image_shape = {n, 28, 28, 1};
  if (!opt.chunk.empty()) {
    image_opt.chunk = {opt.chunk[0], 28, 28, 1};
    label_opt.chunk = {opt.chunk[0]};
  } else if (opt.gzip_level > 0) {
    image_opt.chunk = row_chunk(image_shape, 1);
    label_opt.chunk = {image_opt.chunk[0]};
  }
  write_h5_dataset(file, group + "/images", DType::u8, image_shape, s.images.data.data(),
                   image_opt);
  write_h5_dataset(file, group + "/labels", DType::u8, {n}, s.labels.data.data(), label_opt);
}

}  // namespace

int run_fashion_mnist(int argc, char** argv, const World& world) {
  std::string out, source;
  int64_t chunk_rows = 0;
  int gzip = 4;
  po::options_description opts("fashion-mnist options");
  // clang-format off
  opts.add_options()
      ("out,o", po::value(&out)->required(), "HDF5 file to write (replaced if it exists)")
      ("source", po::value(&source)->default_value(kDefaultSource),
       "folder with train-/t10k-{images-idx3,labels-idx1}-ubyte[.gz]")
      ("chunk-rows", po::value(&chunk_rows)->default_value(0),
       "rows per HDF5 chunk (0: about 64 KiB of images per chunk)")
      ("gzip", po::value(&gzip)->default_value(4), "deflate level 0-9 (0: no compression)");
  // clang-format on
  Parsed p = parse_options("fashion-mnist", argc, argv, opts, "", world);
  if (p.help_shown) return 0;
  require_one_process("fashion-mnist", world);
  if (gzip < 0 || gzip > 9) throw UsageError("--gzip must be 0 to 9, not " + std::to_string(gzip));
  if (chunk_rows < 0) throw UsageError("--chunk-rows must be 0 (automatic) or positive");

  const SplitFiles train_files = find_split(source, "train"),
                   test_files = find_split(source, "t10k");
  const std::string temp = temp_path_for(out, {train_files.images_path, train_files.labels_path,
                                               test_files.images_path, test_files.labels_path});
  Split train = load_split(train_files);
  Split test = load_split(test_files);

  // Normalisation from the training images only, on the [0, 1] scale the loader applies first.
  double sum = 0, sum_sq = 0;
  for (uint8_t v : train.images.data) {
    const double x = v / 255.0;
    sum += x;
    sum_sq += x * x;
  }
  const double count = static_cast<double>(train.images.data.size());
  const double mean = sum / count;
  const double stddev = std::sqrt(std::max(sum_sq / count - mean * mean, 1e-12));

  H5WriteOptions opt;
  opt.gzip_level = gzip;
  if (chunk_rows > 0) opt.chunk = {chunk_rows};
  TempFile guard(temp);
  {
    H5Id file = create_h5_file(temp);
    write_split(file.get(), "train", train, opt);
    write_split(file.get(), "test", test, opt);
    write_h5_attr_int(file.get(), "num_classes", kClasses);
    write_h5_attr_strings(file.get(), "class_names",
                          std::vector<std::string>(kClassNames, kClassNames + kClasses));
    write_h5_attr_double(file.get(), "norm_scale", 1.0 / 255.0);
    write_h5_attr_double(file.get(), "norm_mean", mean);
    write_h5_attr_double(file.get(), "norm_std", stddev);
    write_h5_attr_string(file.get(), "source",
                         "Fashion-MNIST (Zalando Research), IDX files from " + source);
    write_h5_attr_int(file.get(), "lockstep_format", 1);
    close_h5_file(file, temp);
  }
  guard.commit(out);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(out, ec);
  std::printf(
      "wrote %s: train %lld, test %lld images 28x28x1 uint8, %d classes, norm mean %.4f "
      "std %.4f, %.1f MB\n",
      out.c_str(), static_cast<long long>(train.images.dims[0]),
      static_cast<long long>(test.images.dims[0]), kClasses, mean, stddev,
      ec ? 0.0 : static_cast<double>(bytes) / 1e6);
  return 0;
}

}  // namespace lockstep::data
