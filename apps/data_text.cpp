// lockstep-data text: plain files into a byte-level language-modelling corpus (the 'sequence'
// kind of DESIGN.md's data format). Every byte is a token (vocabulary 256, no tokenizer). The
// files are read whole and concatenated in the order given; the bytes are cut into sequences of
// seq_len + 1 bytes that start seq_len bytes apart (sequence i is bytes [i T, i T + T + 1)), so
// consecutive sequences share one byte and every byte after the first is a target exactly once.
// A model reads the first T bytes of a row as inputs and the last T as the targets (shifted by
// one). --test-fraction of the sequences, drawn with --seed, form test/; the rest train/; each
// split keeps text order. Per split: tokens uint8 (N, T + 1) with vocab_size and seq_len
// attributes, and offsets int64 (N,), each row's first byte in the concatenated input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>

#include "apps/data_commands.h"
#include "runtime/base/error.h"
#include "runtime/data/h5_writer.h"

namespace lockstep::data {
namespace {

namespace po = boost::program_options;

constexpr int kVocab = 256;
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxBytes = int64_t{1} << 32;  // 4 GiB of text: far beyond a byte-level demo

std::vector<uint8_t> read_inputs(const std::vector<std::string>& paths) {
  std::vector<uint8_t> bytes;
  for (const auto& path : paths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw UsageError(path + ": no such file");
    if (std::filesystem::is_directory(path, ec))
      throw UsageError(path + ": is a folder; --in takes files");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(path + ": cannot be read");
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw UsageError(path + ": read error");
    if (static_cast<int64_t>(bytes.size()) > kMaxBytes)
      throw UsageError("the inputs hold more than 4 GiB; split the corpus into several files");
  }
  return bytes;
}

void write_split(hid_t file, const std::string& group, const std::vector<int64_t>& starts,
                 const std::vector<uint8_t>& bytes, int64_t seq_len) {
  const int64_t n = static_cast<int64_t>(starts.size()), row = seq_len + 1;
  std::vector<uint8_t> tokens(static_cast<size_t>(n * row));
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(bytes.begin() + starts[static_cast<size_t>(i)], row, tokens.begin() + i * row);
  H5Id g = ensure_h5_group(file, group);
  write_h5_dataset(g.get(), "tokens", {n, row}, tokens);
  write_h5_dataset(g.get(), "offsets", {n}, starts);
  H5Id d(LS_CHECK_HDF5(H5Dopen2(g.get(), "tokens", H5P_DEFAULT)));
  write_h5_attr_int(d.get(), "vocab_size", kVocab);
  write_h5_attr_int(d.get(), "seq_len", seq_len);
}

}  // namespace

int run_text(int argc, char** argv, const World& world) {
  std::vector<std::string> inputs;
  std::string out;
  int64_t seq_len = 0;
  double test_fraction = 0;
  uint64_t seed = 0;
  po::options_description opts("text options");
  // clang-format off
  opts.add_options()
      ("in,i", po::value(&inputs)->multitoken()->required(),
       "text files, read as bytes and concatenated in this order (also given without --in)")
      ("out,o", po::value(&out)->required(), "HDF5 file to write (replaced if it exists)")
      ("seq-len", po::value(&seq_len)->required(),
       "T: tokens a model sees per row; rows hold T + 1 bytes (inputs and shifted targets)")
      ("test-fraction", po::value(&test_fraction)->default_value(0.1, "0.1"),
       "share of the sequences in test/, drawn with --seed (0 < f < 1)")
      ("seed", po::value(&seed)->default_value(0), "seed of the draw of test sequences");
  // clang-format on
  Parsed p = parse_options("text", argc, argv, opts, "in", world, true);
  if (p.help_shown) return 0;
  require_one_process("text", world);
  if (seq_len < 1) throw UsageError("--seq-len must be at least 1, not " + std::to_string(seq_len));
  if (seq_len > kMaxSeqLen)
    throw UsageError("--seq-len must be at most " + std::to_string(kMaxSeqLen));
  if (!(test_fraction > 0 && test_fraction < 1))
    throw UsageError("--test-fraction must be between 0 and 1 (exclusive), not " +
                     std::to_string(test_fraction));
  const std::string temp = temp_path_for(out, inputs);

  const std::vector<uint8_t> bytes = read_inputs(inputs);
  const int64_t total = static_cast<int64_t>(bytes.size());
  if (total < seq_len + 1)
    throw UsageError("the input holds " + std::to_string(total) +
                     " bytes, fewer than one sequence"
                     " of --seq-len + 1 = " +
                     std::to_string(seq_len + 1) + " bytes");
  const int64_t sequences = (total - 1) / seq_len;
  if (sequences < 2)
    throw UsageError("the input holds " + std::to_string(total) + " bytes: one sequence of " +
                     std::to_string(seq_len + 1) +
                     " bytes, and a train and a test split need at "
                     "least two; lower --seq-len or add text");
  const int64_t n_test = std::clamp<int64_t>(
      std::llround(static_cast<double>(sequences) * test_fraction), 1, sequences - 1);

  // The test sequences: a seeded draw (Fisher-Yates on mt19937_64, no std distribution, so a seed
  // gives the same split with every standard library), then both splits back in text order.
  std::vector<int64_t> order(static_cast<size_t>(sequences));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 gen(seed);
  for (int64_t i = sequences - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)],
              order[static_cast<size_t>(gen() % static_cast<uint64_t>(i + 1))]);
  std::vector<int64_t> test(order.begin(), order.begin() + n_test),
      train(order.begin() + n_test, order.end());
  std::sort(test.begin(), test.end());
  std::sort(train.begin(), train.end());
  for (auto* split : {&test, &train})
    for (int64_t& s : *split) s *= seq_len;

  TempFile guard(temp);
  {
    H5Id file = create_h5_file(temp);
    write_split(file.get(), "train", train, bytes, seq_len);
    write_split(file.get(), "test", test, bytes, seq_len);
    std::vector<std::string> names;
    for (const auto& in : inputs) names.push_back(std::filesystem::path(in).filename().string());
    write_h5_attr_strings(file.get(), "source_files", names);
    write_h5_attr_int(file.get(), "source_bytes", total);
    write_h5_attr_int(file.get(), "seed", static_cast<int64_t>(seed));
    write_h5_attr_double(file.get(), "test_fraction", test_fraction);
    write_h5_attr_string(file.get(), "source",
                         "lockstep-data text: byte-level sequences of seq_len + 1 tokens");
    write_h5_attr_int(file.get(), "lockstep_format", 1);
    close_h5_file(file, temp);
  }
  guard.commit(out);
  std::printf(
      "wrote %s: %lld bytes from %zu file(s) -> train %lld, test %lld sequences of "
      "%lld + 1 bytes (vocabulary 256), seed %llu\n",
      out.c_str(), static_cast<long long>(total), inputs.size(),
      static_cast<long long>(train.size()), static_cast<long long>(test.size()),
      static_cast<long long>(seq_len), static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace lockstep::data
