// lockstep-bench: figures for the communication layer and the training loop. The first word picks
// a subcommand (kCommands); the rest are that subcommand's options. Under mpiexec every rank runs
// the same subcommand; rank 0 prints.
//
//   mpiexec -n 2 lockstep-bench collectives -b 8 -e 64M -f 4
//   mpiexec -n 2 lockstep-bench overhead
//   mpiexec -n 2 lockstep-bench train --model cnn --global-batch 128
//   lockstep-bench gemm --model gpt:small --global-batch 8 --device cuda --precision bf16
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/bench_commands.h"
#include "apps/subcommands.h"
#include "runtime/base/error.h"
#include "runtime/process/bootstrap.h"

namespace {

using lockstep::World;

// One row per subcommand (see bench_commands.h).
constexpr lockstep::apps::Subcommand kCommands[] = {
    {"collectives", "time, algorithm and bus bandwidth per collective and size (nccl-tests style)",
     &lockstep::bench::run_collectives_bench},
    {"overhead", "Lockstep all_reduce against a plain MPI_Allreduce of the same buffer",
     &lockstep::bench::run_overhead_bench},
    {"gemm", "a GPT's matrix products one at a time, against the peak (and cuBLASLt's algorithms)",
     &lockstep::bench::run_gemm_bench},
    {"train",
     "training steps/s, step-time spread, phase shares, FLOP/s against a measured sgemm peak",
     &lockstep::bench::run_train_bench},
};

}  // namespace

int main(int argc, char** argv) {
  return lockstep::run_app(argc, argv, [&](const World& world, lockstep::Communicator&) {
    return lockstep::apps::dispatch_subcommand("lockstep-bench", kCommands, argc, argv, world);
  });
}
