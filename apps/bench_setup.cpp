#include "apps/bench_setup.h"

#include "apps/bench_args.h"
#include "runtime/base/error.h"
#include "runtime/base/knobs.h"
#include "runtime/model/layer_registry.h"
#include "runtime/model/layers.h"
#include "runtime/process/blas_threads.h"

namespace lockstep::bench {

namespace po = boost::program_options;

bool parse_with_train_options(const std::string& command, int argc, char** argv, const World& world,
                              po::options_description& desc, const std::vector<std::string>& names,
                              TrainOptions& train, po::variables_map* vm) {
  po::options_description shared("as lockstep-train");
  add_train_options(shared, names);
  desc.add(shared);
  po::variables_map parsed = parse_options(command, argc, argv, desc);
  if (print_help_if_asked(parsed, desc, world.rank)) return false;
  set_train_options(parsed, names, train);
  configured_knobs();  // the environment knobs, refused in words at start-up (knobs.h)
  if (vm != nullptr) *vm = std::move(parsed);
  return true;
}

void check_peak_size(int n) {
  if (n != 0 && (n < 64 || n > 16384))
    throw UsageError("--peak-size must be 0 (automatic) or in [64, 16384]");
}

BenchContext make_bench_context(const World& world, const TrainOptions& train) {
  if (train.device == "cuda" && !layers_available(DeviceKind::cuda))
    throw UsageError("--device cuda: " + gpu_training_missing() + "; use --device cpu");
  ContextOptions co;
  co.device = layers_available(DeviceKind::cuda) ? train.device : "cpu";
  // The subcommands get the World only (bench_commands.h), so each makes its world's host
  // communicator here.
  BenchContext b;
  b.world_comm = make_mpi_communicator();
  b.ctx = make_context(world, *b.world_comm, co);
  b.threads = train.threads > 0 ? train.threads : default_blas_threads(world);
  set_blas_threads(b.threads);
  return b;
}

}  // namespace lockstep::bench
