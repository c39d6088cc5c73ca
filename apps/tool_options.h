// What the single-purpose programs (lockstep-export, lockstep-generate, lockstep-predict) share
// around Boost.Program_options: --help and --version, the refusal of a world of several ranks for
// a program that runs as one process, and the rule that an output file must be new. Header-only,
// as apps/ builds each executable from its own files. Used from main()'s thread; no collective
// calls.
#pragma once

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include "apps/option_hint.h"
#include "runtime/base/build_info.h"
#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"

namespace lockstep::apps {

// Parses argv with `options` and --help/--version into vm. --help prints `usage` and the options,
// --version the version (on rank 0), and both return false: the program then exits 0. A bad or
// missing option is a UsageError naming the program.
inline bool parse_tool_options(const std::string& program, const std::string& usage,
                               boost::program_options::options_description options, int argc,
                               char** argv, const World& world,
                               boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  // clang-format off
  options.add_options()("help,h", "show these options")("version", "show the version and build");
  // clang-format on
  try {
    po::store(po::parse_command_line(argc, argv, options), vm);
    if (vm.count("help") || vm.count("version")) {
      if (world.rank == 0) {
        if (vm.count("help"))
          std::cout << "usage: " << usage << "\n" << options << std::flush;
        else
          std::cout << version_text(program) << std::flush;
      }
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(program + ": " + option_error_text(e, options) + " (see " + program +
                     " --help)");
  }
  return true;
}

inline void require_one_process(const std::string& program, const World& world) {
  if (world.size > 1)
    throw UsageError(program + " runs as one process, not on " + std::to_string(world.size) +
                     " ranks (start it without mpiexec)");
}

// An output the program writes (to a temporary name, renamed into place when complete): it must
// not exist yet, and its folder must.
inline void require_new_output(const std::string& program, const std::string& out) {
  std::error_code ec;
  if (std::filesystem::exists(out, ec))
    throw UsageError(out + ": exists; " + program + " does not overwrite (remove it first)");
  const std::filesystem::path parent = std::filesystem::path(out).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw UsageError(out + ": folder " + parent.string() + " does not exist");
}

}  // namespace lockstep::apps
