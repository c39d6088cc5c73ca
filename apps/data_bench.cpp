// lockstep-data bench FILE: how fast the sharded loader delivers batches. Every rank runs the
// loader over --epochs epochs of the split (no model), optionally sleeping --compute-ms per step to
// stand in for training so the prefetch thread can work ahead. Rank 0 prints, per epoch and per
// rank, samples/s (real rows this rank consumed per second), the bytes this rank read and their
// share of the split, and the time next() waited for data.
//
//   mpiexec -n 4 lockstep-data bench fmnist.h5 --global-batch 256 --epochs 3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "apps/data_commands.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/data/dataset.h"
#include "runtime/data/sharded_loader.h"

namespace lockstep::data {
namespace {

namespace po = boost::program_options;

// "uint8" -> 1, "float64" -> 8: bytes per element from the type names inspect_dataset reports.
double type_bytes(const std::string& name) {
  size_t digits = name.find_first_of("0123456789");
  return digits == std::string::npos ? 0.0 : std::stod(name.substr(digits)) / 8.0;
}

struct EpochFigures {
  double seconds = 0, samples = 0, wait = 0, bytes = 0;
};

}  // namespace

int run_bench(int argc, char** argv, const World& world) {
  DatasetSpec spec;
  LoaderOptions lo;
  int epochs = 0;
  double compute_ms = 0;
  int64_t cache_mb = 0, in_memory_mb = 0;
  std::string remainder;
  bool no_shuffle = false;
  const int64_t cache_default = kDefaultChunkCacheBytes >> 20;
  po::options_description opts("bench options");
  // clang-format off
  opts.add_options()
      ("file", po::value(&spec.path)->required(), "HDF5 dataset file")
      ("group", po::value(&spec.group)->default_value("train"), "split to read")
      ("x-name", po::value(&spec.x_name), "input dataset (default images, else x)")
      ("y-name", po::value(&spec.y_name), "target dataset (default: labels beside images, y beside x; else labels if present, else y)")
      ("global-batch", po::value(&lo.rows_per_step)->required(),
       "global batch B (divisible by the ranks)")
      ("epochs", po::value(&epochs)->default_value(2), "epochs to read")
      ("prefetch", po::value(&lo.prefetch)->default_value(2),
       "batches read ahead (0: read in next())")
      ("seed", po::value(&lo.seed)->default_value(0), "shuffle seed")
      ("no-shuffle", po::bool_switch(&no_shuffle), "file order instead of a permutation per epoch")
      ("remainder", po::value(&remainder)->default_value("mask"),
       "last partial batch: mask or drop")
      ("compute-ms", po::value(&compute_ms)->default_value(0.0, "0"),
       "simulated compute per step (sleep)")
      ("cache-mb",
       po::value(&cache_mb)->default_value(cache_default, std::to_string(cache_default)),
       "HDF5 chunk cache for the inputs, MiB (0: HDF5's default, 1 MiB)")
      ("in-memory-mb", po::value(&in_memory_mb)->default_value(0),
       "read a split of at most this many MiB as stored whole into memory at the first batch, "
       "as lockstep-train does up to --data-in-memory-mb (0: each batch's rows from the file)");
  // clang-format on
  Parsed p = parse_options("bench", argc, argv, opts, "file", world);
  if (p.help_shown) return 0;
  if (epochs < 1) throw UsageError("--epochs must be at least 1");
  if (std::string why = split_problem(lo.rows_per_step, world.size, "--global-batch"); !why.empty())
    throw UsageError(why);
  if (remainder != "mask" && remainder != "drop")
    throw UsageError("--remainder must be mask or drop, not '" + remainder + "'");
  if (cache_mb < 0 || cache_mb > (int64_t{1} << 20))
    throw UsageError("--cache-mb must be 0 to 1048576 MiB, not " + std::to_string(cache_mb));
  if (!(compute_ms >= 0))
    throw UsageError("--compute-ms must be >= 0, not " + std::to_string(compute_ms));
  lo.shuffle = !no_shuffle;
  lo.drop_remainder = remainder == "drop";
  lo.chunk_cache_bytes = cache_mb << 20;
  if (in_memory_mb < 0 || in_memory_mb > (int64_t{1} << 30))
    throw UsageError("--in-memory-mb must be 0 to 2^30 MiB, not " + std::to_string(in_memory_mb));
  lo.in_memory_bytes = in_memory_mb << 20;

  // A batch above the split's rows is refused before the loader sizes its buffers by it (as
  // lockstep-train refuses it): one batch of mostly masked rows measures nothing.
  if (const int64_t rows = inspect_dataset(spec).rows; lo.rows_per_step > rows)
    throw UsageError("--global-batch " + std::to_string(lo.rows_per_step) + " is larger than the " +
                     std::to_string(rows) + " rows of " + spec.path + ":/" + spec.group +
                     ": use at most " + std::to_string(rows));
  auto comm = make_mpi_communicator();
  std::unique_ptr<ShardedLoader> loader = open_sharded_loader(spec, lo, *comm);
  const DatasetInfo& info = loader->info();
  const double split_bytes =
      static_cast<double>(info.rows) *
      (static_cast<double>(info.sample_size) * type_bytes(info.x_type) +
       (info.classification ? 1 : info.target_dim) * type_bytes(info.y_type));

  std::vector<EpochFigures> mine;
  Batch batch;
  const auto compute = std::chrono::duration<double, std::milli>(compute_ms);
  for (int e = 0; e < epochs; ++e) {
    comm->barrier();
    EpochFigures f;
    const uint64_t bytes0 = loader->bytes_read();
    const double wait0 = loader->wait_seconds_total();
    const auto t0 = std::chrono::steady_clock::now();
    loader->start_epoch(e);
    while (loader->next(batch)) {
      f.samples += static_cast<double>(batch.valid);
      if (compute_ms > 0) std::this_thread::sleep_for(compute);
    }
    f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    f.wait = loader->wait_seconds_total() - wait0;
    f.bytes = static_cast<double>(loader->bytes_read() - bytes0);
    mine.push_back(f);
  }

  // Every rank's figures to rank 0: 4 doubles per epoch.
  const size_t per_rank = 4 * mine.size();
  std::vector<double> flat, all(per_rank * static_cast<size_t>(world.size));
  for (const auto& f : mine) flat.insert(flat.end(), {f.seconds, f.samples, f.wait, f.bytes});
  comm->all_gather(flat.data(), all.data(), per_rank, DType::f64);
  if (world.rank != 0) return 0;

  std::printf(
      "lockstep-data bench: %s %s, %lld rows of %s %s, %d rank(s), global batch %lld "
      "(%lld per rank), %lld steps/epoch, prefetch %d, shuffle %s, compute %.1f ms/step, "
      "cache %lld MiB\n",
      info.path.c_str(), info.group.c_str(), static_cast<long long>(info.rows), info.x_type.c_str(),
      info.classification ? "images" : "inputs", world.size,
      static_cast<long long>(lo.rows_per_step),
      static_cast<long long>(lo.rows_per_step / world.size),
      static_cast<long long>(loader->steps_per_epoch()), lo.prefetch, lo.shuffle ? "on" : "off",
      compute_ms, static_cast<long long>(cache_mb));
  std::printf("%5s %5s %12s %10s %8s %10s\n", "epoch", "rank", "samples/s", "MB read", "share",
              "wait s");
  for (int e = 0; e < epochs; ++e) {
    double lo_rate = 1e300, hi_rate = 0, sum_rate = 0;
    for (int r = 0; r < world.size; ++r) {
      const double* f = &all[static_cast<size_t>(r) * per_rank + 4 * static_cast<size_t>(e)];
      const double rate = f[0] > 0 ? f[1] / f[0] : 0;
      lo_rate = std::min(lo_rate, rate);
      hi_rate = std::max(hi_rate, rate);
      sum_rate += rate;
      std::printf("%5d %5d %12.0f %10.2f %7.1f%% %10.3f\n", e + 1, r, rate, f[3] / 1e6,
                  split_bytes > 0 ? 100.0 * f[3] / split_bytes : 0.0, f[2]);
    }
    std::printf("epoch %d: samples/s per rank min %.0f avg %.0f max %.0f\n", e + 1, lo_rate,
                sum_rate / world.size, hi_rate);
  }
  return 0;
}

}  // namespace lockstep::data
