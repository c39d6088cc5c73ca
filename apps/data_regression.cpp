// lockstep-data regression: the linear-regression setting the project grew from. x ~ N(0, 1)
// (N, D) float32, y = x.w + b + noise * N(0, 1) (N,) float32, with w ~ N(0, 1) and b ~ N(0, 1)
// drawn from --seed. train/ holds --samples rows, test/ --test-samples more from the same model.
// The true w and b (and noise, seed) are attributes of the file root, so a trained model can be
// compared with them.
#include <cmath>
#include <cstdio>
#include <random>

#include "apps/data_commands.h"
#include "runtime/base/error.h"
#include "runtime/data/h5_writer.h"

namespace lockstep::data {
namespace {

namespace po = boost::program_options;

constexpr int64_t kMaxValues = int64_t{1} << 31;  // 8 GiB of float32 inputs

// Standard normal draws from mt19937_64 through our own uniform and Box-Muller transform, so a seed
// gives the same file with every standard library (std::normal_distribution is not specified
// exactly).
class Normal {
 public:
  explicit Normal(uint64_t seed) : gen_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  std::mt19937_64 gen_;
  double spare_ = 0;
  bool has_spare_ = false;
};

void write_split(hid_t file, const std::string& group, int64_t n, int64_t d,
                 const std::vector<double>& w, double b, double noise, Normal& normal,
                 const H5WriteOptions& opt) {
  std::vector<float> x(static_cast<size_t>(n * d)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double dot = b;
    for (int64_t j = 0; j < d; ++j) {
      const double v = normal();
      x[static_cast<size_t>(i * d + j)] = static_cast<float>(v);
      dot += static_cast<double>(static_cast<float>(v)) * w[static_cast<size_t>(j)];
    }
    y[static_cast<size_t>(i)] = static_cast<float>(dot + noise * normal());
  }
  H5WriteOptions xo = opt, yo = opt;
  if (!opt.chunk.empty()) {
    xo.chunk = {opt.chunk[0], d};
    yo.chunk = {opt.chunk[0]};
  }
  write_h5_dataset(file, group + "/x", {n, d}, x, xo);
  write_h5_dataset(file, group + "/y", {n}, y, yo);
}

}  // namespace

int run_regression(int argc, char** argv, const World& world) {
  std::string out;
  int64_t samples = 0, features = 0, test_samples = -1, chunk_rows = 0;
  double noise = 0;
  uint64_t seed = 0;
  int gzip = 0;
  po::options_description opts("regression options");
  // clang-format off
  opts.add_options()
      ("out,o", po::value(&out)->required(), "HDF5 file to write (replaced if it exists)")
      ("samples", po::value(&samples)->default_value(10000), "training rows N")
      ("features", po::value(&features)->default_value(8), "input dimension D")
      ("noise", po::value(&noise)->default_value(0.1, "0.1"),
       "standard deviation S of the added noise")
      ("seed", po::value(&seed)->default_value(0), "seed K of w, b, x and the noise")
      ("test-samples", po::value(&test_samples)->default_value(-1),
       "rows of the test split (default: N/5, at least 1)")
      ("chunk-rows", po::value(&chunk_rows)->default_value(0),
       "rows per HDF5 chunk (0: contiguous, or about 64 KiB chunks with --gzip)")
      ("gzip", po::value(&gzip)->default_value(0), "deflate level 0-9 (0: no compression)");
  // clang-format on
  Parsed p = parse_options("regression", argc, argv, opts, "", world);
  if (p.help_shown) return 0;
  require_one_process("regression", world);
  if (test_samples < 0) test_samples = std::max<int64_t>(1, samples / 5);
  if (samples < 1) throw UsageError("--samples must be at least 1, not " + std::to_string(samples));
  if (features < 1)
    throw UsageError("--features must be at least 1, not " + std::to_string(features));
  if (test_samples < 1) throw UsageError("--test-samples must be at least 1");
  if (!(noise >= 0) || !std::isfinite(noise))
    throw UsageError("--noise must be a finite value >= 0, not " + std::to_string(noise));
  if (gzip < 0 || gzip > 9) throw UsageError("--gzip must be 0 to 9, not " + std::to_string(gzip));
  if (chunk_rows < 0) throw UsageError("--chunk-rows must be 0 (automatic) or positive");
  if (samples > kMaxValues / features || test_samples > kMaxValues / features)
    throw UsageError("--samples x --features is too large (at most 2^31 values per split)");

  Normal normal(seed);
  std::vector<double> w(static_cast<size_t>(features));
  for (double& v : w) v = normal();
  const double b = normal();

  H5WriteOptions opt;
  opt.gzip_level = gzip;
  opt.shuffle = gzip > 0;  // byte-shuffling lets deflate find the repeated exponent bytes
  if (chunk_rows > 0) opt.chunk = {chunk_rows};
  const std::string temp = temp_path_for(out);
  TempFile guard(temp);
  {
    H5Id file = create_h5_file(temp);
    write_split(file.get(), "train", samples, features, w, b, noise, normal, opt);
    write_split(file.get(), "test", test_samples, features, w, b, noise, normal, opt);
    write_h5_attr_doubles(file.get(), "true_w", w);
    write_h5_attr_double(file.get(), "true_b", b);
    write_h5_attr_double(file.get(), "noise", noise);
    write_h5_attr_int(file.get(), "seed", static_cast<int64_t>(seed));
    write_h5_attr_string(file.get(), "source",
                         "lockstep-data regression: y = x.w + b + noise*N(0,1)");
    write_h5_attr_int(file.get(), "lockstep_format", 1);
    close_h5_file(file, temp);
  }
  guard.commit(out);
  std::printf("wrote %s: train %lld, test %lld rows, %lld features, noise %g, seed %llu, b %.6f\n",
              out.c_str(), static_cast<long long>(samples), static_cast<long long>(test_samples),
              static_cast<long long>(features), noise, static_cast<unsigned long long>(seed), b);
  return 0;
}

}  // namespace lockstep::data
