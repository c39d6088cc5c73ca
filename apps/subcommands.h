// Subcommand dispatch shared by the multi-command apps (lockstep-data, lockstep-bench): the first
// word picks a row of the app's table; the rest of the arguments go to that row's function. Usage
// and unknown words become a UsageError listing the commands. Header-only: apps/ builds each
// executable from its own files.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "apps/option_hint.h"
#include "runtime/base/build_info.h"
#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"

namespace lockstep::apps {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv, const World& world);
};

inline std::string subcommand_usage(const std::string& program, std::span<const Subcommand> table) {
  std::string text = "usage: " + program + " <command> [options]   (" + program +
                     " <command> --help; " + program + " --version)\ncommands:\n";
  for (const Subcommand& c : table) {
    char line[240];
    std::snprintf(line, sizeof line, "  %-14s %s\n", c.name, c.summary);
    text += line;
  }
  return text;
}

inline int dispatch_subcommand(const std::string& program, std::span<const Subcommand> table,
                               int argc, char** argv, const World& world) {
  if (argc < 2) throw UsageError(program + " needs a command\n" + subcommand_usage(program, table));
  const std::string word = argv[1];
  if (word == "--help" || word == "-h" || word == "help") {
    if (world.rank == 0) std::fputs(subcommand_usage(program, table).c_str(), stdout);
    return 0;
  }
  if (word == "--version") {
    if (world.rank == 0) std::fputs(version_text(program).c_str(), stdout);
    return 0;
  }
  std::vector<std::string> names;
  for (const Subcommand& c : table) {
    if (word == c.name) return c.run(argc - 1, argv + 1, world);
    names.push_back(c.name);
  }
  const std::string near = nearest_name(word, names);
  throw UsageError(program + ": unknown command '" + word + "'" +
                   (near.empty() ? "" : "; did you mean " + near + "?") + "\n" +
                   subcommand_usage(program, table));
}

}  // namespace lockstep::apps
