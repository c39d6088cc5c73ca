// The subcommands of lockstep-data, one function each. data_main.cpp dispatches on the first word
// of the command line and hands the function the words from its name on (argv[0] is the
// subcommand's name) plus the World from run_app. Bad options and bad inputs throw UsageError:
// every rank parses the same words and reads the same files, so every rank leaves together.
// Converters and inspect are one-process tools (they refuse to run on several ranks); bench runs
// on every rank and rank 0 prints. Main thread only.
//
// Adding a subcommand: declare it here, define it in apps/data_<name>.cpp (globbed into the
// executable), and add one row to kCommands in data_main.cpp.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "runtime/process/bootstrap.h"

namespace lockstep::data {

// Fashion-MNIST IDX files (Debian's dataset-fashion-mnist) -> train/ and test/ (data_fashion.cpp).
int run_fashion_mnist(int argc, char** argv, const World& world);

// Synthetic linear regression y = Xw + b + noise, with the true w and b as attributes
// (data_regression.cpp).
int run_regression(int argc, char** argv, const World& world);

// A synthetic dataset: Fashion-MNIST-shaped images or random token sequences (data_synthetic.cpp).
int run_synthetic(int argc, char** argv, const World& world);

// Text files -> byte-level sequences (tokens uint8 (N, T + 1)) in train/ and test/
// (data_text.cpp).
int run_text(int argc, char** argv, const World& world);

// Shard files -> one file of virtual datasets over them, rows in the order given (data_join.cpp).
int run_join(int argc, char** argv, const World& world);

// Groups, datasets, shapes, types, chunking and attributes, then what the loader sees
// (data_inspect.cpp).
int run_inspect(int argc, char** argv, const World& world);

// Loader throughput per rank, bytes read, data wait (data_bench.cpp). Runs under mpiexec.
int run_bench(int argc, char** argv, const World& world);

// Parses the words after the subcommand's name against `options`; `positional` names the option
// that takes a bare word (or is empty), every bare word with `many`. --help prints the options and
// returns an empty map with help_shown set. Unknown options and malformed values become
// UsageError("lockstep-data <command>: ...").
struct Parsed {
  boost::program_options::variables_map vm;
  bool help_shown = false;
};
Parsed parse_options(const std::string& command, int argc, char** argv,
                     const boost::program_options::options_description& options,
                     const std::string& positional, const World& world, bool many = false);

// Throws UsageError when a one-process command is started on several ranks.
void require_one_process(const std::string& command, const World& world);

// Writers write to `out`.tmp and rename it over `out` when complete, so a failed or interrupted
// conversion never leaves a half-written file under the final name; they close the file with
// close_h5_file (h5_writer.h) before the rename, so a failed write (a full disk) is an Error and
// nothing is renamed. Checks up front, before anything is read, and throws UsageError naming the
// path when: the folder of `out` does not exist; `out` or `out`.tmp exists and is not a regular
// file (a folder, a device, a fifo: the rename would replace it); or either is the same file as
// one of `inputs` (which the write would destroy). An existing regular `out` is replaced.
std::string temp_path_for(const std::string& out, const std::vector<std::string>& inputs = {});

// Removes the temporary file unless commit() moved it into place.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void commit(const std::string& out);

 private:
  std::string path_;
  bool done_ = false;
};

}  // namespace lockstep::data
