// lockstep-data: datasets in Lockstep's HDF5 format (DESIGN.md, data format). The first word
// picks a subcommand (kCommands); the rest are that subcommand's options.
//
//   lockstep-data fashion-mnist --out fmnist.h5
//   lockstep-data regression --out reg.h5 --samples 10000 --features 8 --noise 0.1 --seed 1
//   lockstep-data text --in /usr/share/common-licenses/GPL-3 --out gpl3.h5 --seq-len 64
//   lockstep-data join day1.h5 day2.h5 --out all.h5
//   lockstep-data inspect fmnist.h5
//   mpiexec -n 4 lockstep-data bench fmnist.h5 --global-batch 256 --epochs 2
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "apps/data_commands.h"
#include "apps/subcommands.h"
#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"

namespace lockstep::data {

namespace po = boost::program_options;

Parsed parse_options(const std::string& command, int argc, char** argv,
                     const po::options_description& options, const std::string& positional,
                     const World& world, bool many) {
  po::options_description all = options;
  // clang-format off
  all.add_options()("help,h", "show these options");
  // clang-format on
  po::positional_options_description pos;
  if (!positional.empty()) pos.add(positional.c_str(), many ? -1 : 1);
  Parsed p;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), p.vm);
    if (p.vm.count("help")) {
      std::string word = positional;
      for (char& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (world.rank == 0)
        std::cout << "usage: lockstep-data " << command << " "
                  << (word.empty() ? "" : word + (many ? "... " : " ")) << "[options]\n"
                  << all << std::flush;
      p.help_shown = true;
      return p;
    }
    po::notify(p.vm);
  } catch (const po::error& e) {
    throw UsageError("lockstep-data " + command + ": " + apps::option_error_text(e, all) +
                     " (see lockstep-data " + command + " --help)");
  }
  return p;
}

void require_one_process(const std::string& command, const World& world) {
  if (world.size > 1)
    throw UsageError("lockstep-data " + command + " runs as one process, not on " +
                     std::to_string(world.size) + " ranks (start it without mpiexec)");
}

std::string temp_path_for(const std::string& out, const std::vector<std::string>& inputs) {
  std::filesystem::path parent = std::filesystem::path(out).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw UsageError(out + ": folder " + parent.string() + " does not exist");
  if (std::filesystem::is_directory(out, ec))
    throw UsageError(out + ": is a folder, not a file name");
  const std::string temp = out + ".tmp";
  // The temporary file is created over whatever has its name, and renamed over `out`.
  for (const std::string& path : {out, temp}) {
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) continue;
    if (!std::filesystem::is_regular_file(status))
      throw UsageError(path +
                       ": exists and is not a regular file (a folder, a device or a fifo); " +
                       "lockstep-data replaces only regular files (choose another --out)");
    for (const std::string& in : inputs)
      if (std::filesystem::exists(in, ec) && std::filesystem::equivalent(in, path, ec))
        throw UsageError(path + ": is the input " + in +
                         "; writing it would destroy the input (choose another --out)");
  }
  return temp;
}

TempFile::~TempFile() {
  std::error_code ec;
  if (!done_) std::filesystem::remove(path_, ec);
}

void TempFile::commit(const std::string& out) {
  std::error_code ec;
  std::filesystem::rename(path_, out, ec);
  if (ec)
    throw UsageError(out + ": cannot move the finished file into place (" + ec.message() + ")");
  done_ = true;
}

}  // namespace lockstep::data

namespace {

using lockstep::World;

// One row per subcommand (see data_commands.h).
constexpr lockstep::apps::Subcommand kCommands[] = {
    {"fashion-mnist", "convert the Fashion-MNIST IDX files into train/ and test/ splits",
     &lockstep::data::run_fashion_mnist},
    {"regression", "generate y = Xw + b + noise (train/ and test/), true w and b as attributes",
     &lockstep::data::run_regression},
    {"synthetic", "a dataset without a download: 28x28x1 images in 10 classes, or random tokens",
     &lockstep::data::run_synthetic},
    {"text", "byte-level language-model corpus: text files -> sequences of seq_len + 1 bytes",
     &lockstep::data::run_text},
    {"join", "shard files -> one dataset file of virtual datasets over them (no copy)",
     &lockstep::data::run_join},
    {"inspect", "groups, datasets, shapes, types, chunking, attributes; what the loader sees",
     &lockstep::data::run_inspect},
    {"bench", "loader throughput per rank (samples/s), bytes read, data wait; runs under mpiexec",
     &lockstep::data::run_bench},
};

}  // namespace

int main(int argc, char** argv) {
  return lockstep::run_app(argc, argv, [&](const World& world, lockstep::Communicator&) {
    return lockstep::apps::dispatch_subcommand("lockstep-data", kCommands, argc, argv, world);
  });
}
