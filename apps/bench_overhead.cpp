// lockstep-bench overhead: what the Lockstep MPI communicator adds to the MPI call it makes.
//
// Times a blocking Communicator::all_reduce against MPI_Allreduce on the same float32 buffers,
// called from this thread on a duplicate of MPI_COMM_WORLD, for each size of a list (default 8 B,
// 64 B, 4 KiB, 64 MiB: the small ones run on the calling thread, the large one goes through the
// progress thread; comm/mpi_inline.h). Calls alternate (L M, M L, L M, ...) so that both see the
// same machine state, and each call starts after a barrier; a sample is the slowest rank's time.
// Each round reports both medians, their ratio, and the median of the per-pair ratios (a pair is
// the two calls of one step, taken moments apart: on a shared, busy machine load that comes and
// goes over seconds cancels out of it); a summary pools every round, one row per size. This file
// calls MPI directly on purpose: the plain call is the baseline that the rest of apps/ never makes.
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
#include "runtime/comm/replica_check.h"

namespace lockstep::bench {

namespace {

namespace po = boost::program_options;

struct Options {
  std::vector<size_t> sizes;
  int warmup = 5;
  int iters = 20;          // per round, sizes of 1 MiB and more
  int small_iters = 1000;  // per round, smaller sizes (microseconds each: more samples)
  int rounds = 5;
  int iters_for(size_t bytes) const { return bytes >= (size_t{1} << 20) ? iters : small_iters; }
};

// "8,64,4K,64M" -> sizes in bytes, in the order given.
std::vector<size_t> parse_sizes(const std::string& text) {
  std::vector<size_t> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) sizes.push_back(parse_bytes(item, "-b/--bytes"));
  if (sizes.empty()) throw UsageError("-b/--bytes: give one or more sizes, e.g. 8,64,4K,64M");
  return sizes;
}

bool parse(int argc, char** argv, const World& world, Options* o) {
  po::options_description desc("lockstep-bench overhead [options]");
  // clang-format off
  desc.add_options()
      ("help,h", "show this help")
      ("bytes,b", po::value<std::string>()->default_value("8,64,4K,64M"),
       "buffer sizes, comma-separated (8, 1K, 64M, 1G)")
      ("warmup,w", po::value<int>()->default_value(5), "untimed calls of each kind per size first")
      ("iters,n", po::value<int>()->default_value(20),
       "timed calls of each kind per round, sizes of 1 MiB and more")
      ("small-iters", po::value<int>()->default_value(1000),
       "timed calls of each kind per round, sizes below 1 MiB")
      ("rounds,r", po::value<int>()->default_value(5), "rounds per size, each reported on its own line");
  // clang-format on
  po::variables_map vm = parse_options("overhead", argc, argv, desc);
  if (print_help_if_asked(vm, desc, world.rank)) return false;
  o->sizes = parse_sizes(vm["bytes"].as<std::string>());
  o->warmup = vm["warmup"].as<int>();
  o->iters = vm["iters"].as<int>();
  o->small_iters = vm["small-iters"].as<int>();
  o->rounds = vm["rounds"].as<int>();
  for (size_t bytes : o->sizes) {
    if (bytes < sizeof(float))
      throw UsageError("-b/--bytes: each size must hold at least one float32 (4 bytes)");
    if (bytes / sizeof(float) > static_cast<size_t>(INT32_MAX))
      throw UsageError("-b/--bytes: one plain MPI_Allreduce moves at most 2^31-1 elements");
  }
  if (o->warmup < 0) throw UsageError("-w/--warmup must be 0 or more");
  if (o->iters < 1) throw UsageError("-n/--iters must be 1 or more");
  if (o->small_iters < 1) throw UsageError("--small-iters must be 1 or more");
  if (o->rounds < 1) throw UsageError("-r/--rounds must be 1 or more");
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The replica check's checksum (comm/replica_check.h) over 256 MiB: its rate bounds how long a
// replica check of a large model takes on every rank. The median of 5 passes.
void print_checksum_speed() {
  std::vector<unsigned char> buf(size_t{256} << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131);
  std::vector<double> rates;
  uint64_t sink = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    sink ^= checksum64(buf.data(), buf.size());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(static_cast<double>(buf.size()) / s / 1e9);
  }
  std::printf(
      "# replica checksum (checksum64) over 256 MiB: %.2f GB/s (median of 5; sum %016llx)\n",
      median(rates), static_cast<unsigned long long>(sink));
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

// One size's pooled result.
struct SizeResult {
  size_t bytes = 0;
  std::vector<double> lockstep, plain, pairs;  // seconds (slowest rank), ratios
  double wrong[2] = {0, 0};                    // lockstep, mpi
};

// Times all_reduce of `bytes` for o.rounds rounds, printing each round's line on rank 0.
SizeResult time_size(Communicator& comm, MPI_Comm plain, size_t bytes, const Options& o,
                     const World& world) {
  const size_t count = bytes / sizeof(float);
  const int ranks = world.size;
  std::vector<float> send(count), recv_lockstep(count), recv_plain(count);
  for (size_t i = 0; i < count; ++i)
    send[i] = static_cast<float>(input_value(world.rank, i, ranks));

  // Each returns this rank's seconds for one call that starts after a barrier.
  auto time_lockstep = [&] {
    LS_CHECK_MPI(MPI_Barrier(plain));
    auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce(send.data(), recv_lockstep.data(), count, DType::f32, ReduceOp::sum);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto time_plain = [&] {
    LS_CHECK_MPI(MPI_Barrier(plain));
    auto t0 = std::chrono::steady_clock::now();
    LS_CHECK_MPI(MPI_Allreduce(send.data(), recv_plain.data(), static_cast<int>(count), MPI_FLOAT,
                               MPI_SUM, plain));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int k = 0; k < o.warmup; ++k) {
    time_lockstep();
    time_plain();
  }

  SizeResult r;
  r.bytes = count * sizeof(float);
  const int iters = o.iters_for(r.bytes);
  for (int round = 1; round <= o.rounds; ++round) {
    std::vector<double> lockstep(iters), plain_s(iters);
    for (int k = 0; k < iters; ++k) {
      if (k % 2 == 0) {
        lockstep[k] = time_lockstep();
        plain_s[k] = time_plain();
      } else {
        plain_s[k] = time_plain();
        lockstep[k] = time_lockstep();
      }
    }
    comm.all_reduce(lockstep.data(), lockstep.data(), lockstep.size(), DType::f64, ReduceOp::max);
    comm.all_reduce(plain_s.data(), plain_s.data(), plain_s.size(), DType::f64, ReduceOp::max);
    r.lockstep.insert(r.lockstep.end(), lockstep.begin(), lockstep.end());
    r.plain.insert(r.plain.end(), plain_s.begin(), plain_s.end());
    std::vector<double> pairs(iters);
    for (int k = 0; k < iters; ++k) pairs[k] = lockstep[k] / plain_s[k];
    r.pairs.insert(r.pairs.end(), pairs.begin(), pairs.end());
    if (world.rank == 0) {
      double ml = median(lockstep), mp = median(plain_s);
      std::printf("  %9s %5d %20.2f %20.2f %14.2f %8.3f %13.3f\n", format_bytes(r.bytes).c_str(),
                  round, ml * 1e6, mp * 1e6, (ml - mp) * 1e6, ml / mp, median(pairs));
      std::fflush(stdout);
    }
  }
  r.wrong[0] = static_cast<double>(count_wrong(recv_lockstep, ranks));
  r.wrong[1] = static_cast<double>(count_wrong(recv_plain, ranks));
  comm.all_reduce(r.wrong, r.wrong, 2, DType::f64, ReduceOp::sum);
  return r;
}

}  // namespace

int run_overhead_bench(int argc, char** argv, const World& world) {
  Options o;
  if (!parse(argc, argv, world, &o)) return 0;

  auto comm = make_mpi_communicator();
  MPI_Comm plain = MPI_COMM_NULL;
  LS_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &plain));
  MPI_Comm_set_errhandler(plain, MPI_ERRORS_RETURN);

  if (world.rank == 0) {
    std::string sizes;
    for (size_t b : o.sizes) sizes += (sizes.empty() ? "" : ", ") + format_bytes(b);
    std::printf(
        "# lockstep-bench overhead: all_reduce of float32 (sum, out of place), %d rank(s), "
        "sizes %s\n",
        world.size, sizes.c_str());
    std::printf(
        "# lockstep = Communicator::all_reduce (mpi backend), mpi = MPI_Allreduce from the "
        "calling thread\n");
    std::printf(
        "# per size: %d rounds of %d calls each (%d below 1 MiB), alternating, after %d "
        "warm-up calls each; a sample is the slowest rank's time\n",
        o.rounds, o.iters, o.small_iters, o.warmup);
    std::printf("# %9s %5s %20s %20s %14s %8s %13s\n", "size", "round", "lockstep median(us)",
                "mpi median(us)", "extra(us)", "ratio", "paired ratio");
    std::fflush(stdout);
  }
  std::vector<SizeResult> results;
  for (size_t bytes : o.sizes) results.push_back(time_size(*comm, plain, bytes, o, world));
  MPI_Comm_free(&plain);

  double wrong[2] = {0, 0};
  for (const SizeResult& r : results) {
    wrong[0] += r.wrong[0];
    wrong[1] += r.wrong[1];
  }
  if (world.rank == 0) {
    std::printf("# summary, every round pooled:\n");
    std::printf("# %9s %8s %20s %12s %15s %12s %10s %8s %13s\n", "size", "samples",
                "lockstep median(us)", "min(us)", "mpi median(us)", "min(us)", "extra(us)", "ratio",
                "paired ratio");
    std::string ratios, paired;
    for (const SizeResult& r : results) {
      double ml = median(r.lockstep), mp = median(r.plain), mpair = median(r.pairs);
      std::printf("  %9s %8zu %20.2f %12.2f %15.2f %12.2f %10.2f %8.3f %13.3f\n",
                  format_bytes(r.bytes).c_str(), r.lockstep.size(), ml * 1e6,
                  *std::min_element(r.lockstep.begin(), r.lockstep.end()) * 1e6, mp * 1e6,
                  *std::min_element(r.plain.begin(), r.plain.end()) * 1e6, (ml - mp) * 1e6, ml / mp,
                  mpair);
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s %.3f", ratios.empty() ? "" : ", ",
                    format_bytes(r.bytes).c_str(), ml / mp);
      ratios += buf;
      std::snprintf(buf, sizeof buf, "%s%s %.3f", paired.empty() ? "" : ", ",
                    format_bytes(r.bytes).c_str(), mpair);
      paired += buf;
    }
    std::printf("# overhead ratio (lockstep / mpi medians): %s\n", ratios.c_str());
    std::printf("# paired overhead ratio (median of lockstep / mpi per step): %s\n",
                paired.c_str());
    std::printf("# wrong values: lockstep %.0f, mpi %.0f\n", wrong[0], wrong[1]);
    print_checksum_speed();
    std::fflush(stdout);
  }
  return wrong[0] == 0 && wrong[1] == 0 ? 0 : 1;
}

}  // namespace lockstep::bench
