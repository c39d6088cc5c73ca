// lockstep-bench collectives: time, algorithm bandwidth and bus bandwidth per size, in nccl-tests
// conventions, for every collective on every backend that this binary can run.
//
// One harness (options, communicators, buffers, warm-up, timing, checking, output) and one entry
// per collective in kCollectives: its name, its buffers for a given size, its bus-bandwidth
// factor, how to start it and what each output element must hold. Adding a collective is one
// entry. A size is the bytes of the larger buffer (nccl-tests): all_gather's output,
// reduce_scatter's input, rounded down to whole elements (and whole blocks per rank).
//
// Per size: -w warm-up calls, a barrier, then -n calls issued back to back and waited for in
// order (--blocking: each waited for before the next). The time is the mean per call on each rank,
// shown min/avg/max over ranks; algbw = size / avg time, busbw = algbw x the entry's factor. The
// output of the last timed call is then checked on every rank; #wrong sums the bad elements of
// all ranks. Timings and counts are combined through a separate MPI communicator on the host, so
// the measured communicator carries nothing but the measured calls.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench_args.h"
#include "apps/bench_commands.h"
#include "apps/bench_values.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/process/context.h"
#include "runtime/process/device.h"

namespace lockstep::bench {

namespace {

namespace po = boost::program_options;

struct Layout {
  size_t count = 0;       // the `count` argument of the call (per-rank block for gather/scatter)
  size_t send_elems = 0;  // elements read from the send buffer
  size_t recv_elems = 0;  // elements written to the receive buffer
};

struct Call {
  const void* send;
  void* recv;
  Layout layout;
  DType type;
  ReduceOp op;
  int root;
  int rank;
  int ranks;
};

struct CollectiveEntry {
  const char* name;
  const char* bus_rule;  // how busbw follows from algbw, for the table heading
  bool uses_op;
  bool uses_root;
  bool recv_is_input;  // the receive buffer holds the input too (broadcast works in place)
  double (*bus_factor)(int ranks);
  Layout (*layout)(size_t elems, int ranks);  // elems: how many elements the size holds
  WorkHandle (*start)(Communicator& comm, const Call& call);
  double (*expected)(const Call& call, size_t i);  // what recv[i] must hold afterwards
};

const CollectiveEntry kCollectives[] = {
    {"all_reduce", "algbw x 2(n-1)/n", true, false, false, [](int n) { return 2.0 * (n - 1) / n; },
     [](size_t e, int) {
       return Layout{e, e, e};
     },
     [](Communicator& comm, const Call& c) {
       return comm.all_reduce_async(c.send, c.recv, c.layout.count, c.type, c.op);
     },
     [](const Call& c, size_t i) { return reduced_value(c.op, c.type, i, c.ranks); }},
    {"broadcast", "algbw x 1", false, true, true, [](int) { return 1.0; },
     [](size_t e, int) {
       return Layout{e, 0, e};
     },
     [](Communicator& comm, const Call& c) {
       return comm.broadcast_async(c.recv, c.layout.count, c.type, c.root);
     },
     [](const Call& c, size_t i) { return input_value(c.root, i, c.ranks); }},
    {"all_gather", "algbw x (n-1)/n", false, false, false, [](int n) { return (n - 1.0) / n; },
     [](size_t e, int n) {
       return Layout{e / n, e / n, e / n * n};
     },
     [](Communicator& comm, const Call& c) {
       return comm.all_gather_async(c.send, c.recv, c.layout.count, c.type);
     },
     [](const Call& c, size_t i) {
       return input_value(static_cast<int>(i / c.layout.count), i % c.layout.count, c.ranks);
     }},
    {"reduce_scatter", "algbw x (n-1)/n", true, false, false, [](int n) { return (n - 1.0) / n; },
     [](size_t e, int n) {
       return Layout{e / n, e / n * n, e / n};
     },
     [](Communicator& comm, const Call& c) {
       return comm.reduce_scatter_async(c.send, c.recv, c.layout.count, c.type, c.op);
     },
     [](const Call& c, size_t i) {
       return reduced_value(c.op, c.type, c.rank * c.layout.count + i, c.ranks);
     }},
};

std::string collective_names() {
  std::string names;
  for (const CollectiveEntry& e : kCollectives) {
    if (!names.empty()) names += ", ";
    names += e.name;
  }
  return names;
}

struct Options {
  std::vector<size_t> sizes;
  int warmup = 5;
  int iters = 20;
  std::vector<const CollectiveEntry*> collectives;
  std::string backend = "all";
  DType type = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool blocking = false;
  Millis timeout = kDefaultCollectiveTimeout;
};

po::options_description describe_options() {
  po::options_description o("lockstep-bench collectives [options]");
  // clang-format off
  o.add_options()
      ("help,h", "show this help")
      ("minbytes,b", po::value<std::string>()->default_value("8"), "smallest size (8, 1K, 64M, 1G)")
      ("maxbytes,e", po::value<std::string>()->default_value("64M"), "largest size")
      ("stepfactor,f", po::value<int>()->default_value(2), "size factor from one row to the next")
      ("warmup,w", po::value<int>()->default_value(5), "untimed calls per size")
      ("iters,n", po::value<int>()->default_value(20), "timed calls per size")
      ("collective,c", po::value<std::string>()->default_value("all"),
       "all, or a comma-separated list of: all_reduce, broadcast, all_gather, reduce_scatter")
      ("backend", po::value<std::string>()->default_value("all"),
       "mpi, nccl, or all (nccl where built and a GPU per rank answers; else a line says why not)")
      ("dtype,d", po::value<std::string>()->default_value("float32"),
       "float32, float64, bfloat16, float16, int32, int64 or uint8")
      ("op,o", po::value<std::string>()->default_value("sum"), "sum, mean, max or min")
      ("root,r", po::value<int>()->default_value(0), "broadcast root")
      ("blocking", "wait for each call before issuing the next")
      ("timeout", po::value<double>()->default_value(60), "seconds one call may take");
  // clang-format on
  return o;
}

std::vector<const CollectiveEntry*> parse_collectives(const std::string& text) {
  std::vector<const CollectiveEntry*> out;
  std::stringstream words(text);
  std::string word;
  while (std::getline(words, word, ',')) {
    if (word == "all") {
      for (const CollectiveEntry& e : kCollectives) out.push_back(&e);
      continue;
    }
    auto it = std::find_if(std::begin(kCollectives), std::end(kCollectives),
                           [&](const CollectiveEntry& e) { return word == e.name; });
    if (it == std::end(kCollectives))
      throw UsageError("-c/--collective '" + word + "' is not a collective (use all, or " +
                       collective_names() + ")");
    if (std::find(out.begin(), out.end(), &*it) == out.end()) out.push_back(&*it);
  }
  if (out.empty()) throw UsageError("-c/--collective names no collective");
  return out;
}

// Returns false when --help was asked for (the help has then been printed).
bool parse(int argc, char** argv, const World& world, Options* o) {
  po::options_description desc = describe_options();
  po::variables_map vm = parse_options("collectives", argc, argv, desc);
  if (print_help_if_asked(vm, desc, world.rank)) return false;
  int factor = vm["stepfactor"].as<int>();
  if (factor < 2)
    throw UsageError("-f/--stepfactor must be 2 or more, not " + std::to_string(factor));
  o->sizes = size_series(parse_bytes(vm["minbytes"].as<std::string>(), "-b/--minbytes"),
                         parse_bytes(vm["maxbytes"].as<std::string>(), "-e/--maxbytes"),
                         static_cast<size_t>(factor));
  o->warmup = vm["warmup"].as<int>();
  o->iters = vm["iters"].as<int>();
  if (o->warmup < 0) throw UsageError("-w/--warmup must be 0 or more");
  if (o->iters < 1) throw UsageError("-n/--iters must be 1 or more");
  o->collectives = parse_collectives(vm["collective"].as<std::string>());
  o->backend = vm["backend"].as<std::string>();
  if (o->backend != "all") parse_backend(o->backend);  // throws on anything but mpi | nccl
  o->type = parse_dtype(vm["dtype"].as<std::string>());
  o->op = parse_op(vm["op"].as<std::string>());
  o->root = vm["root"].as<int>();
  if (o->root < 0 || o->root >= world.size)
    throw UsageError("-r/--root " + std::to_string(o->root) + " is not a rank of this world of " +
                     std::to_string(world.size));
  o->blocking = vm.count("blocking") > 0;
  double seconds = vm["timeout"].as<double>();
  if (!(seconds > 0)) throw UsageError("--timeout must be a positive number of seconds");
  o->timeout = Millis(static_cast<long long>(seconds * 1000));
  return true;
}

// The send and receive buffers of one backend, sized for the largest call, on the host or on the
// current CUDA device, with a host staging area to fill and check them.
class Buffers {
 public:
  Buffers(bool device, size_t bytes) : device_(device), bytes_(std::max<size_t>(bytes, 1)) {
    try {
      staging_.resize(bytes_);
      if (device_) {
        send_ = kernels::cuda_alloc(bytes_);
        recv_ = kernels::cuda_alloc(bytes_);
      } else {
        host_send_.resize(bytes_);
        host_recv_.resize(bytes_);
        send_ = host_send_.data();
        recv_ = host_recv_.data();
      }
    } catch (const std::bad_alloc&) {
      release();
      throw Error(rank_prefix() + " cannot allocate 3 buffers of " + format_bytes(bytes_) +
                  " for -e/--maxbytes: use a smaller maximum size");
    }
  }
  ~Buffers() { release(); }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  void* send() const { return send_; }
  void* recv() const { return recv_; }
  unsigned char* staging() { return staging_.data(); }

  void upload(void* dst, size_t bytes) {
    if (bytes == 0) return;
    if (device_)
      kernels::cuda_copy_to_device(dst, staging_.data(), bytes);
    else
      std::memcpy(dst, staging_.data(), bytes);
  }
  void download(const void* src, size_t bytes) {
    if (bytes == 0) return;
    if (device_)
      kernels::cuda_copy_to_host(staging_.data(), src, bytes);
    else
      std::memcpy(staging_.data(), src, bytes);
  }

 private:
  void release() {
    if (device_) {
      kernels::cuda_free(send_);
      kernels::cuda_free(recv_);
    }
    send_ = recv_ = nullptr;
  }

  bool device_;
  size_t bytes_;
  std::vector<unsigned char> staging_, host_send_, host_recv_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
};

struct Row {
  size_t bytes = 0;
  size_t elems = 0;
  double t_min = 0, t_avg = 0, t_max = 0;  // microseconds per call
  long long wrong = 0;
};

// One size of one collective: fill, warm up, time, check, combine over ranks.
Row measure(const CollectiveEntry& entry, Communicator& comm, Communicator& host, Buffers& buf,
            const Options& o, size_t size) {
  const int rank = comm.rank();
  const int ranks = comm.size();
  const size_t es = dtype_size(o.type);
  const Layout l = entry.layout(size / es, ranks);
  Call call{buf.send(), buf.recv(), l, o.type, o.op, o.root, rank, ranks};
  auto stage_inputs = [&](size_t n) {
    for (size_t i = 0; i < n; ++i)
      store_value(o.type, buf.staging(), i, input_value(rank, i, ranks));
  };

  stage_inputs(l.send_elems);
  buf.upload(buf.send(), l.send_elems * es);
  if (entry.recv_is_input) {
    stage_inputs(l.recv_elems);
  } else {
    std::memset(buf.staging(), 0, l.recv_elems * es);  // no expected value is 0
  }
  buf.upload(buf.recv(), l.recv_elems * es);

  for (int k = 0; k < o.warmup; ++k) entry.start(comm, call)->wait(o.timeout);
  comm.barrier();
  auto t0 = std::chrono::steady_clock::now();
  if (o.blocking) {
    for (int k = 0; k < o.iters; ++k) entry.start(comm, call)->wait(o.timeout);
  } else {
    std::vector<WorkHandle> pending;
    pending.reserve(o.iters);
    for (int k = 0; k < o.iters; ++k) pending.push_back(entry.start(comm, call));
    for (WorkHandle& w : pending) w->wait(o.timeout);
  }
  std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - t0;
  double us = elapsed.count() / o.iters;

  buf.download(buf.recv(), l.recv_elems * es);
  long long wrong = 0;
  for (size_t i = 0; i < l.recv_elems; ++i) {
    double got = load_value(o.type, buf.staging(), i);
    if (!values_match(o.type, got, entry.expected(call, i))) ++wrong;
  }

  double hi[2] = {us, -us};
  host.all_reduce(hi, hi, 2, DType::f64, ReduceOp::max);
  double sums[2] = {us, static_cast<double>(wrong)};
  host.all_reduce(sums, sums, 2, DType::f64, ReduceOp::sum);
  Row row;
  row.bytes = std::max(l.send_elems, l.recv_elems) * es;
  row.elems = std::max(l.send_elems, l.recv_elems);
  row.t_max = hi[0];
  row.t_min = -hi[1];
  row.t_avg = sums[0] / ranks;
  row.wrong = static_cast<long long>(sums[1]);
  return row;
}

void print_heading(const CollectiveEntry& entry, int ranks) {
  std::printf("#\n# %s   busbw = %s (n = %d)\n", entry.name, entry.bus_rule, ranks);
  std::printf("# %12s %12s %9s %6s %5s %11s %11s %11s %12s %12s %7s\n", "size(B)", "count", "type",
              "redop", "root", "min(us)", "avg(us)", "max(us)", "algbw(GB/s)", "busbw(GB/s)",
              "#wrong");
}

// Runs every selected collective over every size on `comm`; returns the wrong values it saw.
long long run_backend(const char* label, Communicator& comm, Communicator& host, bool device,
                      const Options& o) {
  const int rank = comm.rank();
  const int ranks = comm.size();
  if (rank == 0) std::printf("#\n# backend %s\n", label);
  Buffers buf(device, o.sizes.back());
  long long wrong = 0;
  for (const CollectiveEntry* entry : o.collectives) {
    if (rank == 0) print_heading(*entry, ranks);
    double busbw_sum = 0;
    for (size_t size : o.sizes) {
      Row row = measure(*entry, comm, host, buf, o, size);
      wrong += row.wrong;
      double algbw = row.t_avg > 0 ? row.bytes / row.t_avg / 1e3 : 0;  // bytes/us/1e3 = GB/s
      double busbw = algbw * entry->bus_factor(ranks);
      busbw_sum += busbw;
      if (rank != 0) continue;
      std::printf("  %12zu %12zu %9s %6s %5s %11.1f %11.1f %11.1f %12.3f %12.3f %7lld\n", row.bytes,
                  row.elems, dtype_name(o.type), entry->uses_op ? reduce_op_name(o.op) : "-",
                  entry->uses_root ? std::to_string(o.root).c_str() : "-", row.t_min, row.t_avg,
                  row.t_max, algbw, busbw, row.wrong);
      std::fflush(stdout);
    }
    if (rank == 0)
      std::printf("# %s: average busbw %.3f GB/s over %zu sizes\n", entry->name,
                  busbw_sum / o.sizes.size(), o.sizes.size());
  }
  return wrong;
}

// Every rank gives its verdict; returns "" when all can run NCCL, else the first failing rank's
// reason (the same text on every rank). The GPU is picked as lockstep-train picks it
// (choose_device: the launcher's GPU slot; check_gpu_sharing: one rank per GPU), so both use the
// same GPU per rank.
std::string nccl_problem(Communicator& host, const World& world, DeviceChoice* device) {
  std::string why;
  if (!nccl_available()) {
    why = "this binary was built without NCCL (configure with LOCKSTEP_CUDA=ON)";
  } else {
    try {
      *device = choose_device("cuda", world);
    } catch (const UsageError& e) {
      why = e.what();
    }
  }
  try {
    agree_or_throw(host, why.empty(), why);
    check_gpu_sharing(host, world, *device, /*share_allowed=*/false);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

int run_collectives_bench(int argc, char** argv, const World& world) {
  Options o;
  if (!parse(argc, argv, world, &o)) return 0;
  auto host = make_mpi_communicator();
  host->set_timeout(o.timeout);
  const bool want_mpi = o.backend == "all" || o.backend == "mpi";
  const bool want_nccl = o.backend == "all" || o.backend == "nccl";
  // Decided before any output: an explicit --backend nccl that cannot run is a usage error.
  DeviceChoice device;
  const std::string nccl_skip = want_nccl ? nccl_problem(*host, world, &device) : "";
  if (!nccl_skip.empty() && o.backend == "nccl") throw UsageError("--backend nccl: " + nccl_skip);
  if (world.rank == 0) {
    std::printf("# lockstep-bench collectives: %d rank(s), dtype %s, op %s, root %d\n", world.size,
                dtype_name(o.type), reduce_op_name(o.op), o.root);
    std::printf("# sizes %s to %s (%zu sizes), warm-up %d, iterations %d, %s\n",
                format_bytes(o.sizes.front()).c_str(), format_bytes(o.sizes.back()).c_str(),
                o.sizes.size(), o.warmup, o.iters,
                o.blocking ? "each call waited for before the next"
                           : "calls issued back to back, then waited for in order");
    std::fflush(stdout);
  }
  long long wrong = 0;
  if (want_mpi) {
    auto comm = make_mpi_communicator();
    comm->set_timeout(o.timeout);
    wrong += run_backend("mpi (host buffers)", *comm, *host, false, o);
  }
  if (want_nccl && !nccl_skip.empty()) {
    if (world.rank == 0) std::printf("#\n# backend nccl: skipped, %s\n", nccl_skip.c_str());
  } else if (want_nccl) {
    activate_device(device);
    auto comm = make_nccl_communicator(device.index, o.timeout, *host);
    wrong += run_backend("nccl (device buffers)", *comm, *host, true, o);
  }
  if (world.rank == 0) {
    std::printf("#\n# wrong values: %lld%s\n", wrong,
                wrong == 0 ? " (every result checked)" : "  FAILED");
    std::fflush(stdout);
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace lockstep::bench
