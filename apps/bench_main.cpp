// lockstep-bench: figures for the communication layer and the training loop. The first word picks
// a subcommand (kCommands); the rest are that subcommand's options. Under mpiexec every rank runs
// the same subcommand; rank 0 prints.
//
//   mpiexec -n 2 lockstep-bench collectives -b 8 -e 64M -f 4
//   mpiexec -n 2 lockstep-bench overhead
//   mpiexec -n 2 lockstep-bench train --model cnn --global-batch 128
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/bench_commands.h"
#include "runtime/bootstrap.h"
#include "runtime/error.h"

namespace {

using lockstep::World;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv, const World& world);
};

// One row per subcommand (see bench_commands.h).
constexpr Command kCommands[] = {
    {"collectives", "time, algorithm and bus bandwidth per collective and size (nccl-tests style)",
     &lockstep::bench::run_collectives_bench},
    {"overhead", "Lockstep all_reduce against a plain MPI_Allreduce of the same buffer",
     &lockstep::bench::run_overhead_bench},
    {"train", "training steps/s, step-time spread, phase shares, FLOP/s against a measured sgemm peak",
     &lockstep::bench::run_train_bench},
};

std::string usage() {
  std::string text =
      "usage: lockstep-bench <command> [options]   (lockstep-bench <command> --help)\n"
      "commands:\n";
  for (const Command& c : kCommands) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-12s %s\n", c.name, c.summary);
    text += line;
  }
  return text;
}

int dispatch(int argc, char** argv, const World& world) {
  if (argc < 2) throw lockstep::UsageError("lockstep-bench needs a command\n" + usage());
  const std::string word = argv[1];
  if (word == "--help" || word == "-h" || word == "help") {
    if (world.rank == 0) std::fputs(usage().c_str(), stdout);
    return 0;
  }
  for (const Command& c : kCommands)
    if (word == c.name) return c.run(argc - 1, argv + 1, world);
  throw lockstep::UsageError("lockstep-bench: unknown command '" + word + "'\n" + usage());
}

}  // namespace

int main(int argc, char** argv) {
  return lockstep::run_app(argc, argv,
                           [&](const World& world) { return dispatch(argc, argv, world); });
}
