// What lockstep-bench's train and gemm subcommands share: lockstep-train's options taken by name
// from its table (the same help, defaults and refusals: train_options.h), the peak product's size,
// and the rank's device context with its BLAS threads. Main thread only; make_bench_context is
// collective (make_context's bootstrap over the world).
#pragma once

#include <boost/program_options.hpp>
#include <memory>
#include <string>
#include <vector>

#include "apps/train_options.h"
#include "runtime/base/communicator.h"
#include "runtime/process/bootstrap.h"
#include "runtime/process/context.h"

namespace lockstep::bench {

// Parses the words after the subcommand's name against `desc` plus lockstep-train's rows `names`
// (shown under "as lockstep-train"), sets them in `train` and reads the environment knobs (refused
// in words, knobs.h). Returns false when --help was asked for (rank 0 printed it); `vm` gets the
// parsed values (whether an option was given).
bool parse_with_train_options(const std::string& command, int argc, char** argv, const World& world,
                              boost::program_options::options_description& desc,
                              const std::vector<std::string>& names, TrainOptions& train,
                              boost::program_options::variables_map* vm = nullptr);

// --peak-size: 0 (automatic) or in [64, 16384], else UsageError.
void check_peak_size(int n);

// The rank's device (--device as lockstep-train picks it; cuda refused in words where this build
// cannot train on a GPU), over the world's host communicator, which it keeps (the Context points at
// it); --threads (0: cores / ranks on the host) set as the BLAS and OpenMP threads.
struct BenchContext {
  std::unique_ptr<Communicator> world_comm;
  Context ctx;
  int threads = 1;
};
BenchContext make_bench_context(const World& world, const TrainOptions& train);

}  // namespace lockstep::bench
