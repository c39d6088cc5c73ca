// lockstep-data synthetic: a dataset to try Lockstep (or time it) without a download. images:
// Fashion-MNIST's shape (28x28x1 uint8 images in 10 classes, a brighter column stripe marking the
// class, so the loss falls); tokens: random byte (or id) sequences in lockstep-data text's layout
// for the gpt: models. The same arguments write the same file (runtime/data/synthetic.h).
#include <algorithm>
#include <cstdio>
#include <string>

#include "apps/data_commands.h"
#include "runtime/base/error.h"
#include "runtime/data/synthetic.h"

namespace lockstep::data {

namespace po = boost::program_options;

int run_synthetic(int argc, char** argv, const World& world) {
  std::string out, kind;
  int64_t samples = 0, test_samples = -1;
  int seq_len = 0, vocab = 0;
  po::options_description opts("synthetic options");
  // clang-format off
  opts.add_options()
      ("out,o", po::value(&out)->required(), "HDF5 file to write (replaced if it exists)")
      ("kind", po::value(&kind)->default_value("images"),
       "images (28x28x1 in 10 classes, for --model cnn or mlp) | tokens (for --model gpt...)")
      ("samples", po::value(&samples)->default_value(10000), "training rows N")
      ("test-samples", po::value(&test_samples)->default_value(-1),
       "rows of the test split (default: N/5, at least 1)")
      ("seq-len", po::value(&seq_len)->default_value(128),
       "tokens: positions a row trains on (each row holds seq_len + 1 tokens)")
      ("vocab", po::value(&vocab)->default_value(256),
       "tokens: ids below this (256: bytes; above, int32 ids as gpt:...,vocab=V reads)");
  // clang-format on
  Parsed p = parse_options("synthetic", argc, argv, opts, "", world);
  if (p.help_shown) return 0;
  require_one_process("synthetic", world);
  if (kind != "images" && kind != "tokens")
    throw UsageError("--kind must be images or tokens, not '" + kind + "'");
  if (test_samples < 0) test_samples = std::max<int64_t>(1, samples / 5);
  if (samples < 1) throw UsageError("--samples must be at least 1, not " + std::to_string(samples));
  if (test_samples < 1) throw UsageError("--test-samples must be at least 1");
  if (seq_len < 1 || seq_len > (1 << 20))
    throw UsageError("--seq-len must be 1 to 2^20, not " + std::to_string(seq_len));
  if (vocab < 2 || vocab > (1 << 24))
    throw UsageError("--vocab must be 2 to 2^24, not " + std::to_string(vocab));
  // A split is one buffer in memory: at most 2^31 values (2 GiB of images).
  const int64_t row = kind == "images" ? 28 * 28 : int64_t{seq_len} + 1;
  if (samples > (int64_t{1} << 31) / row || test_samples > (int64_t{1} << 31) / row)
    throw UsageError("--samples is too large for a synthetic split (at most 2^31 values each)");

  const std::string temp = temp_path_for(out);
  TempFile guard(temp);
  if (kind == "images")
    write_synthetic_images(temp, samples, test_samples);
  else
    write_synthetic_tokens(temp, samples, test_samples, seq_len, vocab);
  guard.commit(out);
  std::printf("wrote %s: %s, train %lld, test %lld rows%s\n", out.c_str(), kind.c_str(),
              static_cast<long long>(samples), static_cast<long long>(test_samples),
              kind == "tokens" ? (", " + std::to_string(seq_len) + " + 1 tokens below " +
                                  std::to_string(vocab) + " a row")
                                     .c_str()
                               : " of 28x28x1 images in 10 classes");
  return 0;
}

}  // namespace lockstep::data
