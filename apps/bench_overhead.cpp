// lockstep-bench overhead: what the Lockstep MPI communicator adds to the MPI call it makes.
//
// Times a blocking Communicator::all_reduce (queued to the backend's progress thread, waited for
// with a deadline) against MPI_Allreduce on the same float32 buffers, called from this thread on
// a duplicate of MPI_COMM_WORLD. Calls alternate (L M, M L, L M, ...) so that both see the same
// machine state, and each call starts after a barrier; a sample is the slowest rank's time. Each
// round reports both medians, their ratio, and the median of the per-pair ratios (a pair is the two
// calls of one step, taken moments apart: on a shared, busy machine load that comes and goes over
// seconds cancels out of it); the last lines pool every round. This file calls MPI directly on
// purpose: the plain call is the baseline that the rest of apps/ never makes.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench_args.h"
#include "apps/bench_commands.h"
#include "apps/bench_values.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"

namespace lockstep::bench {

namespace {

namespace po = boost::program_options;

struct Options {
  size_t bytes = size_t{64} << 20;
  int warmup = 3;
  int iters = 20;
  int rounds = 5;
};

bool parse(int argc, char** argv, const World& world, Options* o) {
  po::options_description desc("lockstep-bench overhead [options]");
  desc.add_options()
      ("help,h", "show this help")
      ("bytes,b", po::value<std::string>()->default_value("64M"), "buffer size (8, 1K, 64M, 1G)")
      ("warmup,w", po::value<int>()->default_value(3), "untimed calls of each kind first")
      ("iters,n", po::value<int>()->default_value(20), "timed calls of each kind per round")
      ("rounds,r", po::value<int>()->default_value(5), "rounds, each reported on its own line");
  po::variables_map vm = parse_options("overhead", argc, argv, desc);
  if (print_help_if_asked(vm, desc, world.rank)) return false;
  o->bytes = parse_bytes(vm["bytes"].as<std::string>(), "-b/--bytes");
  o->warmup = vm["warmup"].as<int>();
  o->iters = vm["iters"].as<int>();
  o->rounds = vm["rounds"].as<int>();
  if (o->bytes < sizeof(float))
    throw UsageError("-b/--bytes must hold at least one float32 (4 bytes)");
  if (o->warmup < 0) throw UsageError("-w/--warmup must be 0 or more");
  if (o->iters < 1) throw UsageError("-n/--iters must be 1 or more");
  if (o->rounds < 1) throw UsageError("-r/--rounds must be 1 or more");
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Elements of `recv` that are not the sum over ranks of input_value.
long long count_wrong(const std::vector<float>& recv, int ranks) {
  long long wrong = 0;
  for (size_t i = 0; i < recv.size(); ++i) {
    double want = reduced_value(ReduceOp::sum, DType::f32, i, ranks);
    if (!values_match(DType::f32, recv[i], want)) ++wrong;
  }
  return wrong;
}

}  // namespace

int run_overhead_bench(int argc, char** argv, const World& world) {
  Options o;
  if (!parse(argc, argv, world, &o)) return 0;
  const size_t count = o.bytes / sizeof(float);
  const int ranks = world.size;
  if (count > static_cast<size_t>(INT32_MAX))
    throw UsageError("-b/--bytes: one plain MPI_Allreduce moves at most 2^31-1 elements");

  auto comm = make_mpi_communicator();
  MPI_Comm plain = MPI_COMM_NULL;
  LS_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &plain));
  MPI_Comm_set_errhandler(plain, MPI_ERRORS_RETURN);

  std::vector<float> send(count), recv_lockstep(count), recv_plain(count);
  for (size_t i = 0; i < count; ++i)
    send[i] = static_cast<float>(input_value(world.rank, i, ranks));

  // Each returns this rank's seconds for one call that starts after a barrier.
  auto time_lockstep = [&] {
    LS_CHECK_MPI(MPI_Barrier(plain));
    auto t0 = std::chrono::steady_clock::now();
    comm->all_reduce(send.data(), recv_lockstep.data(), count, DType::f32, ReduceOp::sum);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto time_plain = [&] {
    LS_CHECK_MPI(MPI_Barrier(plain));
    auto t0 = std::chrono::steady_clock::now();
    LS_CHECK_MPI(MPI_Allreduce(send.data(), recv_plain.data(), static_cast<int>(count), MPI_FLOAT,
                               MPI_SUM, plain));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  if (world.rank == 0) {
    std::printf("# lockstep-bench overhead: all_reduce of %s float32 (sum, out of place), "
                "%d rank(s)\n",
                format_bytes(count * sizeof(float)).c_str(), ranks);
    std::printf("# lockstep = Communicator::all_reduce (mpi backend), mpi = MPI_Allreduce from the "
                "calling thread\n");
    std::printf("# %d rounds of %d calls each, alternating, after %d warm-up calls each; "
                "a sample is the slowest rank's time\n",
                o.rounds, o.iters, o.warmup);
    std::printf("# %5s %20s %20s %14s %8s %13s\n", "round", "lockstep median(us)", "mpi median(us)",
                "extra(us)", "ratio", "paired ratio");
    std::fflush(stdout);
  }
  for (int k = 0; k < o.warmup; ++k) {
    time_lockstep();
    time_plain();
  }

  std::vector<double> all_lockstep, all_plain, all_pairs;
  for (int round = 1; round <= o.rounds; ++round) {
    std::vector<double> lockstep(o.iters), plain_s(o.iters);
    for (int k = 0; k < o.iters; ++k) {
      if (k % 2 == 0) {
        lockstep[k] = time_lockstep();
        plain_s[k] = time_plain();
      } else {
        plain_s[k] = time_plain();
        lockstep[k] = time_lockstep();
      }
    }
    comm->all_reduce(lockstep.data(), lockstep.data(), lockstep.size(), DType::f64, ReduceOp::max);
    comm->all_reduce(plain_s.data(), plain_s.data(), plain_s.size(), DType::f64, ReduceOp::max);
    all_lockstep.insert(all_lockstep.end(), lockstep.begin(), lockstep.end());
    all_plain.insert(all_plain.end(), plain_s.begin(), plain_s.end());
    std::vector<double> pairs(o.iters);
    for (int k = 0; k < o.iters; ++k) pairs[k] = lockstep[k] / plain_s[k];
    all_pairs.insert(all_pairs.end(), pairs.begin(), pairs.end());
    if (world.rank == 0) {
      double ml = median(lockstep), mp = median(plain_s);
      std::printf("  %5d %20.1f %20.1f %14.1f %8.3f %13.3f\n", round, ml * 1e6, mp * 1e6,
                  (ml - mp) * 1e6, ml / mp, median(pairs));
      std::fflush(stdout);
    }
  }

  double wrong[2] = {static_cast<double>(count_wrong(recv_lockstep, ranks)),
                     static_cast<double>(count_wrong(recv_plain, ranks))};
  comm->all_reduce(wrong, wrong, 2, DType::f64, ReduceOp::sum);
  MPI_Comm_free(&plain);

  if (world.rank == 0) {
    double ml = median(all_lockstep), mp = median(all_plain);
    double bus = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;
    double gb = static_cast<double>(count * sizeof(float)) / 1e9;
    std::printf("# all %zu samples: lockstep median %.1f us (min %.1f), "
                "mpi median %.1f us (min %.1f), extra %.1f us per call\n",
                all_lockstep.size(), ml * 1e6,
                *std::min_element(all_lockstep.begin(), all_lockstep.end()) * 1e6, mp * 1e6,
                *std::min_element(all_plain.begin(), all_plain.end()) * 1e6, (ml - mp) * 1e6);
    std::printf("# busbw at the median: lockstep %.3f GB/s, mpi %.3f GB/s\n", gb / ml * bus,
                gb / mp * bus);
    std::printf("# overhead ratio (lockstep / mpi medians): %.3f\n", ml / mp);
    std::printf("# paired overhead ratio (median of lockstep / mpi per step): %.3f\n",
                median(all_pairs));
    std::printf("# wrong values: lockstep %.0f, mpi %.0f\n", wrong[0], wrong[1]);
    std::fflush(stdout);
  }
  return wrong[0] == 0 && wrong[1] == 0 ? 0 : 1;
}

}  // namespace lockstep::bench
