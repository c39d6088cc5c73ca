// NCCL with peers: every rank its own NCCL rank, several ranks in the job. On a machine with one
// GPU the ranks share it, each given its own NCCL_HOSTID: NCCL refuses two ranks on one GPU of one
// host, but ranks whose host hashes differ count as separate hosts to it and talk over its network
// transport (sockets on loopback with NCCL_SOCKET_IFNAME=lo) - the multi-node path, proxy thread
// included, which one NCCL rank never takes (its collectives are local copies).
// scripts/gpu-check.sh runs it so (part multi-rank) at 2 and 3 ranks:
//   mpiexec -n 2 sh -c 'NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec "$0" "$@"' nccl_hosts_gpu_mpi_test
// What it checks:
//   - every collective, element type and reduce op at small sizes gives, byte for byte, the MPI
//     backend's result for the same inputs;
//   - a mean of constants is exactly the constant (fp32, bf16, f16; at 3 ranks 1/3 is inexact);
//   - the CNN trained 20 steps at P ranks ends within 1e-5 (relative L2) of one rank that takes
//     the same global batches in P micro-batches, every rank holding the same parameters;
//   - captured steps (CUDA graphs, NCCL inside) give the bits of uncaptured ones;
//   - a capture that fails on one rank is agreed: every rank goes on uncaptured, at once, with
//     the bits of --cuda-graphs off;
//   - a loss that is not finite on one rank alone skips the step on every rank, captured or not.
// Skips, saying why, where no GPU answers, or where ranks share a GPU without distinct
// NCCL_HOSTID values (ctest's plain mpiexec runs).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collective_cases.h"
#include "gpu_test_util.h"
#include "kernels/cuda/memory.h"
#include "runtime/base/communicator.h"
#include "runtime/base/dtype.h"
#include "runtime/base/knobs.h"
#include "runtime/comm/nccl_bootstrap.h"
#include "runtime/process/bootstrap.h"
#include "runtime/train/trainer.h"
#include "solo_communicator.h"
#include "test_util.h"
#include "train_fixtures.h"

using namespace lockstep;
using namespace lockstep::testing_util;
using Clock = std::chrono::steady_clock;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Why this job cannot run NCCL with peers here ("" when it can), the same on every rank; the GPU
// this rank takes in *device.
std::string peers_skip_reason(int* device) {
  std::string why = gpu_skip_reason();
  const World world = discover_world();
  std::string reason;
  const int gpus = why.empty() ? cuda_device_count(&reason) : 0;
  *device = gpus > 0 ? world.local_rank % gpus : 0;
  // Every rank's NCCL_HOSTID: distinct values make ranks on one GPU separate hosts to NCCL.
  constexpr int kLen = 128;
  char mine[kLen] = {};
  if (const char* h = std::getenv("NCCL_HOSTID")) std::snprintf(mine, kLen, "%s", h);
  std::vector<char> all(static_cast<size_t>(kLen) * world.size);
  MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> ids;
  for (int r = 0; r < world.size; ++r) {
    std::string id(&all[static_cast<size_t>(r) * kLen]);
    if (!id.empty()) ids.insert(id);
  }
  const bool own_hosts = static_cast<int>(ids.size()) == world.size;
  if (why.empty() && gpus < world.local_size && !own_hosts)
    why = std::to_string(world.local_size) + " ranks share " + std::to_string(gpus) +
          " GPU(s) and their NCCL_HOSTID values are not distinct (give each rank its own, e.g. "
          "sh -c 'NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec \"$0\" \"$@\"')";
  // Every rank takes the same verdict (a rank without a GPU makes all skip).
  int ok = why.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (ok == 0 && why.empty()) why = "another rank has no usable GPU for NCCL";
  return why;
}

// The job's host communicator and NCCL communicator, made once (NCCL's start-up over sockets is
// the slow part) and released before MPI finalizes.
struct Peers {
  std::unique_ptr<Communicator> host, nccl;
};
Peers& peers() {
  static Peers p;
  return p;
}

class NcclPeers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = peers_skip_reason(&device_);
    if (!skip_.empty()) return;
    activate_device({DeviceKind::cuda, device_});
    Peers& p = peers();
    p.host = make_mpi_communicator();
    p.host->set_timeout(std::chrono::seconds(120));
    p.nccl = make_nccl_communicator(device_, std::chrono::seconds(120), *p.host);
    if (p.nccl->rank() == 0)
      std::printf("NCCL with peers: %d rank(s) on GPU %d, NCCL_HOSTID %s on rank 0\n",
                  p.nccl->size(), device_,
                  std::getenv("NCCL_HOSTID") ? std::getenv("NCCL_HOSTID") : "<unset>");
  }
  static void TearDownTestSuite() {
    peers().nccl.reset();
    peers().host.reset();
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  Communicator& host() { return *peers().host; }
  Communicator& nccl() { return *peers().nccl; }

  static std::string skip_;
  static int device_;
};
std::string NcclPeers::skip_;
int NcclPeers::device_ = 0;

// ---- collectives against the MPI backend ----

// `count` values of type t for `rank`: test_value(rank, i), small integers exact in every type.
std::vector<unsigned char> encoded(DType t, size_t count, int rank) {
  std::vector<unsigned char> out(count * dtype_size(t));
  for (size_t i = 0; i < count; ++i)
    store_value(t, out.data() + i * dtype_size(t), test_value(rank, i));
  return out;
}

// A device copy of host bytes, freed at scope end.
struct OnDevice {
  explicit OnDevice(size_t bytes) : ptr(kernels::cuda_alloc(bytes > 0 ? bytes : 1)), size(bytes) {}
  OnDevice(const std::vector<unsigned char>& host) : OnDevice(host.size()) {
    kernels::cuda_copy_to_device(ptr, host.data(), host.size());
  }
  ~OnDevice() { kernels::cuda_free(ptr); }
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> h(size);
    kernels::cuda_copy_to_host(h.data(), ptr, size);
    return h;
  }
  void* ptr;
  size_t size;
};

enum class Kind { all_reduce, all_reduce_in_place, reduce_scatter, all_gather, broadcast };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::all_reduce_in_place: return "all_reduce in place";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::all_gather: return "all_gather";
    case Kind::broadcast: return "broadcast";
  }
  return "?";
}

// One collective on `comm` over buffers made by `ops`; returns the output's bytes.
std::vector<unsigned char> run_one(Communicator& comm, bool device, Kind k, DType t, ReduceOp op,
                                   int root, size_t n) {
  const int P = comm.size(), r = comm.rank();
  const size_t es = dtype_size(t);
  const size_t in_count = k == Kind::reduce_scatter ? n * P : n;
  const size_t out_count = k == Kind::all_gather ? n * P : n;
  std::vector<unsigned char> in = encoded(t, in_count, r);
  std::vector<unsigned char> out(out_count * es, 0xA5);  // poisoned
  auto call = [&](const void* send, void* recv, void* inout) {
    switch (k) {
      case Kind::all_reduce: comm.all_reduce(send, recv, n, t, op); break;
      case Kind::all_reduce_in_place: comm.all_reduce(inout, inout, n, t, op); break;
      case Kind::reduce_scatter: comm.reduce_scatter(send, recv, n, t, op); break;
      case Kind::all_gather: comm.all_gather(send, recv, n, t); break;
      case Kind::broadcast: comm.broadcast(inout, n, t, root); break;
    }
  };
  const bool inout = k == Kind::all_reduce_in_place || k == Kind::broadcast;
  if (!device) {
    if (inout) {
      call(nullptr, nullptr, in.data());
      return in;
    }
    call(in.data(), out.data(), nullptr);
    return out;
  }
  OnDevice din(in), dout(out);
  if (inout) {
    call(nullptr, nullptr, din.ptr);
    return din.read();
  }
  call(din.ptr, dout.ptr, nullptr);
  return dout.read();
}

TEST_F(NcclPeers, EveryCollectiveTypeAndOpGivesTheMpiBackendsBytes) {
  auto mpi = make_mpi_communicator();
  mpi->set_timeout(std::chrono::seconds(120));
  const int P = nccl().size();
  size_t cases = 0, wrong_cases = 0;
  for (DType t : all_dtypes()) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{65539}}) {
      for (Kind k : {Kind::all_reduce, Kind::all_reduce_in_place, Kind::reduce_scatter,
                     Kind::all_gather, Kind::broadcast}) {
        const bool reduces = k != Kind::all_gather && k != Kind::broadcast;
        const std::vector<ReduceOp> ops =
            reduces ? all_ops() : std::vector<ReduceOp>{ReduceOp::sum};
        const int roots = k == Kind::broadcast ? P : 1;
        for (ReduceOp op : ops) {
          for (int root = 0; root < roots; ++root) {
            const auto want = run_one(*mpi, false, k, t, op, root, n);
            const auto got = run_one(nccl(), true, k, t, op, root, n);
            ++cases;
            if (got == want) continue;
            ++wrong_cases;
            size_t first = 0;
            while (first < got.size() && got[first] == want[first]) ++first;
            ADD_FAILURE() << kind_name(k) << " " << dtype_name(t) << " "
                          << (reduces ? reduce_op_name(op) : "") << " root " << root << ", " << n
                          << " elements: bytes differ from the MPI backend's from byte " << first
                          << " (element " << first / dtype_size(t) << ")";
          }
        }
      }
    }
  }
  if (nccl().rank() == 0)
    std::printf("%zu collective cases at %d ranks: %zu differ from the MPI backend\n", cases, P,
                wrong_cases);
}

TEST_F(NcclPeers, MeanOfAConstantIsExactlyTheConstant) {
  const int P = nccl().size();
  const size_t n = 1000;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (double c : {1.0, 0.75, 3.0, 96.0}) {
      std::vector<unsigned char> host(n * dtype_size(t));
      for (size_t i = 0; i < n; ++i) store_value(t, host.data() + i * dtype_size(t), c);
      OnDevice buf(host);
      nccl().all_reduce(buf.ptr, buf.ptr, n, t, ReduceOp::mean);
      EXPECT_EQ(buf.read(), host) << "mean over " << P << " ranks of " << c << " in "
                                  << dtype_name(t);
      // reduce_scatter: each rank's block of P blocks of the constant.
      std::vector<unsigned char> blocks;
      for (int r = 0; r < P; ++r) blocks.insert(blocks.end(), host.begin(), host.end());
      OnDevice in(blocks), out(host.size());
      nccl().reduce_scatter(in.ptr, out.ptr, n, t, ReduceOp::mean);
      EXPECT_EQ(out.read(), host) << "reduce_scatter mean over " << P << " ranks of " << c << " in "
                                  << dtype_name(t);
    }
  }
}

// ---- training ----

// 16 rows per rank per step, 10 steps an epoch: the 20 steps cross an epoch and its evaluation.
const std::string& data_file() {
  static const std::string path = [] {
    const std::string path = shared_temp_dir("nccl_hosts_gpu") + "/images.h5";
    if (world_rank() == 0) {
      StripedImages s;
      s.side = 28;
      s.train_rows = 160 * world_size();
      s.test_rows = 48;
      write_striped_images(path, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
  }();
  return path;
}

// The CNN (--model cnn) with its convolutions pinned to im2col + cuBLAS, so that every run takes
// the same kernels whatever cuDNN's timing would pick.
TrainConfig cnn(int micro_batches) {
  Knobs k = configured_knobs();
  k.cuda_conv = CudaConvKnob::im2col;
  configure_knobs(k);
  TrainConfig c;
  c.train.path = data_file();
  c.model = "cnn";
  c.optimizer.kind = OptimizerKind::momentum;
  c.lr = 0.02;
  c.global_batch = 16 * world_size();
  c.grad_accum = micro_batches;
  c.steps = 20;
  c.bucket_mb = 0.05;  // several buckets
  c.seed = 7;
  c.print = false;
  c.device = DeviceKind::cuda;
  return c;
}

// Captured and uncaptured runs: Adam, a warm-up and cosine schedule (read from device memory by
// the graph), clipping, a bucket per layer.
TrainConfig cnn_graphs(bool graphs) {
  TrainConfig c = cnn(1);
  c.optimizer.kind = OptimizerKind::adam;
  c.lr = 2e-3;
  c.lr_schedule = LrScheduleKind::cosine;
  c.warmup_steps = 3;
  c.min_lr = 1e-4;
  c.clip_norm = 0.5;
  c.bucket_mb = 1e-6;
  c.cuda_graphs = graphs;
  return c;
}

// Elements of this rank's parameters whose bits differ from rank 0's.
size_t differing_from_rank0(Communicator& host, const std::vector<float>& params) {
  std::vector<float> rank0 = params;
  host.broadcast(rank0.data(), rank0.size(), DType::f32, 0);
  return differing(params, rank0);
}

// Sets an environment variable for a scope (a test hook the Trainer reads when it is made).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

TEST_F(NcclPeers, PRanksMatchOneRankWithPMicroBatches) {
  const int P = nccl().size();
  const Trained parallel = train(host(), nccl(), cnn(1));
  SoloCommunicator solo;
  const Trained alone = train(solo, solo, cnn(P));
  const double rel = relative_difference(parallel.params, alone.params);
  if (nccl().rank() == 0)
    std::printf(
        "CNN, 20 steps: %d NCCL ranks vs 1 rank with %d micro-batches: relative L2 "
        "difference %.3g, test loss %.6f vs %.6f\n",
        P, P, rel, parallel.result.test.loss, alone.result.test.loss);
  EXPECT_LT(rel, 1e-5);
  EXPECT_EQ(parallel.updates, 20);
  EXPECT_EQ(0u, differing_from_rank0(host(), parallel.params)) << "the ranks' parameters differ";
}

TEST_F(NcclPeers, CapturedStepsGiveTheBitsOfUncapturedSteps) {
  const Trained want = train(host(), nccl(), cnn_graphs(false));
  const Trained got = train(host(), nccl(), cnn_graphs(true));
  EXPECT_EQ(0, want.captured);
  EXPECT_EQ(18, got.captured) << "every step after the two warm-up steps is a graph's";
  expect_same_bits(got, want);
  EXPECT_EQ(0u, differing_from_rank0(host(), got.params)) << "the ranks' parameters differ";
  if (nccl().rank() == 0)
    std::printf(
        "captured at %d ranks: %lld of 20 steps, %.2f s (uncaptured %.2f s), test loss "
        "%.6f, differing parameters %zu\n",
        nccl().size(), static_cast<long long>(got.captured), got.seconds, want.seconds,
        got.result.test.loss, differing(got.params, want.params));
}

TEST_F(NcclPeers, ACaptureFailingOnOneRankIsAgreedAtOnce) {
  const Trained want = train(host(), nccl(), cnn_graphs(false));
  ScopedEnv hook("LOCKSTEP_TEST_CAPTURE_FAIL_RANK", std::to_string(nccl().size() - 1));
  const Trained got = train(host(), nccl(), cnn_graphs(true));
  EXPECT_EQ(0, got.captured) << "a rank captured although the last rank's capture failed";
  expect_same_bits(got, want);
  // Not the collective timeout (120 s) of a rank left waiting in the capture.
  EXPECT_LT(got.seconds, want.seconds + 30) << "the fallback waited";
}

TEST_F(NcclPeers, ALossNotFiniteOnOneRankSkipsTheStepOnEveryRank) {
  // Step 5's loss is +Inf on the last rank alone, its gradient finite.
  ScopedEnv hook("LOCKSTEP_TEST_LOSS_INF", std::to_string(nccl().size() - 1) + ":5");
  Trained runs[2];
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "captured" : "uncaptured");
    TrainConfig c = cnn_graphs(graphs);
    c.guard.on_nan = NanPolicy::skip;
    const Trained& r = runs[graphs] = train(host(), nccl(), c);
    EXPECT_EQ(1, r.skipped);
    EXPECT_EQ(19, r.updates);
    if (graphs) {
      EXPECT_EQ(18, r.captured) << "step 5 is a replay whose gate leaves the update out";
    }
    EXPECT_EQ(0u, differing_from_rank0(host(), r.params)) << "the ranks' parameters differ";
  }
  EXPECT_EQ(0u, differing(runs[1].params, runs[0].params))
      << "the captured run skipped otherwise than the uncaptured one";
}

TEST_F(NcclPeers, ZeroStagesOneAndTwoMatchUnshardedOverNccl) {
  // --zero 1 over NCCL: in-place reduce-scatters into each rank's blocks, the norm over the
  // shards, the update of this rank's blocks, in-place all-gathers; uncaptured here (the captured
  // steps: the next test). --zero 2: the same from the reducer's device staging ring (small
  // buckets, so the ring takes turns), its blocks added into the compact sums on the stream; the
  // bits of --zero 1.
  TrainConfig c = cnn(1);
  c.clip_norm = 0.5;
  c.bucket_mb = 0.02;
  c.cuda_graphs = false;
  c.zero = 0;
  const Trained want = train(host(), nccl(), c);
  std::vector<float> unsharded;
  {
    Trainer again(host(), nccl(), c);
    again.run();
    unsharded = params_by_tensor(again);
    EXPECT_EQ(0u, differing(again.model().params_to_host(), want.params)) << "not reproducible";
  }
  std::vector<float> stage_one;
  for (int stage = 1; stage <= 2; ++stage) {
    c.zero = stage;
    Trainer sharded(host(), nccl(), c);
    sharded.run();
    const std::vector<float> got = params_by_tensor(sharded);
    const double rel = relative_difference(got, unsharded);
    if (nccl().rank() == 0)
      std::printf(
          "--zero %d over NCCL at %d rank(s), CNN momentum 20 steps: relative L2 %.3g against "
          "--zero 0; optimizer state per rank %llu bytes, gradients %llu\n",
          stage, nccl().size(), rel, static_cast<unsigned long long>(sharded.memory_use().state),
          static_cast<unsigned long long>(sharded.memory_use().grads));
    EXPECT_LT(rel, 1e-5) << "--zero " << stage;
    EXPECT_EQ(0, sharded.captured_steps());
    EXPECT_EQ(0u, differing_from_rank0(host(), sharded.model().params_to_host()))
        << "--zero " << stage << ": the ranks' parameters differ";
    if (stage == 1) stage_one = got;
    if (stage == 2) {
      EXPECT_EQ(0u, differing(got, stage_one)) << "--zero 2 differs from --zero 1";
    }
  }
}

TEST_F(NcclPeers, ZeroStageOneCapturedMatchesUncaptured) {
  // --zero 1 in the step's CUDA graph: the reduce-scatters, the norm over the shards (each rank's
  // blocks' norms, all-reduced in the graph), the clipping, the gated update and the all-gathers
  // replayed as one launch. Against the same run uncaptured: the same bits at 1 and 2 ranks; at 3
  // the norm's cross-rank sum runs in NCCL's order instead of MPI's (a last-bit difference in the
  // clipping factor at most), so within 1e-6. Every rank holds the same parameters.
  Trained runs[2];
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "captured" : "uncaptured");
    TrainConfig c = cnn_graphs(graphs);  // Adam, warm-up and cosine schedule, clipping
    c.bucket_mb = 0.02;
    c.zero = 1;
    const Trained& r = runs[graphs] = train(host(), nccl(), c);
    EXPECT_EQ(graphs ? 18 : 0, r.captured);
    EXPECT_EQ(0u, differing_from_rank0(host(), r.params)) << "the ranks' parameters differ";
  }
  if (nccl().size() <= 2) {
    EXPECT_EQ(0u, differing(runs[1].params, runs[0].params));
  } else {
    EXPECT_LT(relative_difference(runs[1].params, runs[0].params), 1e-6);
  }
}

TEST_F(NcclPeers, ZeroBf16GatherCapturedMatchesUncaptured) {
  // --precision bf16 --zero 1: the all-gather's wire is bf16 (--gather-dtype auto), each rank's
  // fp32 masters cast into the bf16 buffer on the stream, gathered over NCCL and widened into the
  // parameters, in the graph and out of it. Every rank computes with the same parameters, each
  // the bf16 rounding of its saved fp32 master; captured equals uncaptured (bits at 1-2 ranks; at
  // 3 the norm's sum in NCCL's order may move a master by its last bit and, rarely, a rounding).
  std::vector<float> params[2], masters[2];
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "captured" : "uncaptured");
    TrainConfig c = cnn_graphs(graphs);
    c.precision = Precision::bf16;
    c.bucket_mb = 0.02;
    c.zero = 1;
    Trainer t(host(), nccl(), c);
    t.run();
    EXPECT_EQ(graphs ? 18 : 0, t.captured_steps());
    params[graphs] = t.model().params_to_host();
    masters[graphs] = t.params_to_save();
    EXPECT_GT(t.memory_use().masters, 0u) << "bf16 runs gather in bf16 by default";
    EXPECT_EQ(0u, differing_from_rank0(host(), params[graphs])) << "the ranks' parameters differ";
    const Bf16Rounding r = bf16_rounding(params[graphs], masters[graphs]);
    EXPECT_EQ(0u, r.not_rounding) << "parameters that are not the bf16 rounding of their masters";
    EXPECT_GT(r.unrounded_masters, masters[graphs].size() / 2) << "the masters look rounded";
  }
  if (nccl().size() <= 2) {
    EXPECT_EQ(0u, differing(masters[1], masters[0]));
    EXPECT_EQ(0u, differing(params[1], params[0]));
  } else {
    EXPECT_LT(relative_difference(masters[1], masters[0]), 1e-4);
  }
}

}  // namespace
