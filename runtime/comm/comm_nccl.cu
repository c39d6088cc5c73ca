// NCCL backend of Communicator (DESIGN.md decisions 2 and 3); stands in for comm_nccl_stub.cpp.
//
// Bootstrap: rank 0's ncclGetUniqueId reaches every rank by MPI_Bcast; every rank creates its
// communicator on its device with ncclCommInitRankConfig in NCCL's non-blocking mode
// (config.blocking = 0) and polls it under the communicator's timeout, so a rank that never joins
// fails the others with a TimeoutError instead of hanging them; then a barrier (NCCL has none: a
// one-word all-reduce).
//
// Non-blocking mode: any NCCL call may return ncclInProgress and finish in NCCL's background
// thread (the first collective to a peer connects to it, for one). Until the communicator's state
// (ncclCommGetAsyncError) is ncclSuccess again, no other NCCL call may be made on it and an
// enqueued collective is not on its stream yet, so nothing may be ordered after it (an event, a
// copy, a stream-ordered free). Each call is therefore followed by settle(), which polls that state
// under the timeout; once it returns, the collective is on the stream as in blocking mode.
//
// Streams: collectives run on the communicator's own stream. Before each one that stream waits on
// an event recorded on the compute stream (set_compute_stream), so a collective reads buffers only
// after the kernels that wrote them, and the host does not block; after it, an event is recorded
// that the Work handle polls. Both streams are blocking streams, so work on the legacy default
// stream (plain cudaMemcpy uploads) is ordered before them as well.
//
// CUDA graphs: capturable() is true. A collective issued while the compute stream is captured
// joins its stream to the capture through the compute stream's event, and join_stream() joins it
// back; such a collective runs at each replay of the graph. watch_stream() gives a handle on an
// event after a launched graph whose wait polls like a collective's (watchdog, abort at the
// deadline), since the graph's collectives have no handles of their own.
//
// Trace: while --trace records, each collective is also a span timed by the device on the track
// "GPU stream: nccl" (gpu_trace.h), from when the stream starts it (after the compute stream's
// event) to when it finishes, with its bytes and dtype.
//
// Watchdog: waits poll the collective's completion event and NCCL's asynchronous error under a
// deadline; on a timeout or an error the communicator is aborted, on a helper thread that is given
// a grace period, and the rank ends the job should the abort itself hang (nccl_watchdog.h).
// The destructor shuts down cleanly only when every collective has completed: ncclCommFinalize
// polled under the timeout, then ncclCommDestroy, which is then local and cannot block; every
// other path is that bounded abort.
//
// Differences from the MPI backend a caller may see: bf16/f16 are reduced by NCCL in their own
// precision (each addition rounds); mean is ncclAvg (floats: sum pre-multiplied by 1/size;
// integers: sum, then division rounded toward zero, as the interface promises), except on one rank,
// where it is ncclSum: the same values, and NCCL 2.28's one-rank ncclAvg left 3 of 2^20 + 3 floats
// of an out-of-place all_reduce or reduce_scatter unwritten on an H200 (collectives_gpu_test).
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <sstream>

#include "runtime/base/communicator.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/comm/nccl_watchdog.h"
#include "runtime/observe/gpu_trace.h"

namespace lockstep {

namespace detail {

const char* nccl_hint(ncclResult_t rc) {
  switch (rc) {
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed; rerun with NCCL_DEBUG=WARN to see which";
    case ncclSystemError:
      return "a system call or the network failed; rerun with NCCL_DEBUG=WARN, check "
             "NCCL_SOCKET_IFNAME and that every host can reach the others";
    case ncclInvalidUsage:
      return "a misuse such as two ranks on one GPU (NCCL needs one GPU per rank; --comm mpi lets "
             "ranks share one) or ranks calling different collectives";
    case ncclInvalidArgument:
      return "a bad pointer, count or root: NCCL buffers must be device memory";
    case ncclRemoteError:
      return "a peer rank failed or exited; look at the other ranks' output";
    default:
      return "rerun with NCCL_DEBUG=WARN for NCCL's own account";
  }
}

void throw_nccl_error(const char* call, ncclResult_t rc, const char* file, int line) {
  std::string reason = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') reason += std::string(" (") + last + ")";
  throw_call_error(call, reason, file, line, nccl_hint(rc));
}

}  // namespace detail

bool nccl_available() { return true; }

namespace {

using nccl::Backoff;
using nccl::Clock;
using nccl::NcclState;
using nccl::NcclWork;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op, int world_size) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::mean: return world_size == 1 ? ncclSum : ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

std::string describe(const char* name, size_t count, DType type, const std::string& extra) {
  std::ostringstream os;
  os << "nccl " << name << " (" << count << " x " << dtype_name(type);
  if (!extra.empty()) os << ", " << extra;
  os << ")";
  return os.str();
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Enqueues an NCCL call inside launch(): returns once it is on the stream (settled), throws
// Error with the call's text when NCCL refused it.
#define LS_NCCL_ISSUE(call, what) issued((call), #call, (what), __FILE__, __LINE__)

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int device, Millis timeout)
      : device_(device), state_(std::make_shared<NcclState>()) {
    set_timeout(timeout);
    state_->device = device;
    try {
      init();
    } catch (...) {
      release(/*failing=*/true);
      throw;
    }
  }

  // During unwinding (an error elsewhere) peers may never reach a clean shutdown: abort instead.
  ~NcclCommunicator() override { release(std::uncaught_exceptions() > 0); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::nccl; }

  void set_compute_stream(void* stream) override {
    compute_stream_ = static_cast<cudaStream_t>(stream);
  }

  // NCCL supports stream capture: a collective issued while the compute stream is captured runs
  // on this communicator's stream, which joined the capture through compute_ready_.
  bool capturable() const override { return true; }

  void join_stream(void* stream) override {
    LS_CHECK_CUDA(cudaEventRecord(joined_, stream_));
    LS_CHECK_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), joined_, 0));
  }

  WorkHandle watch_stream(void* stream, const std::string& what) override {
    if (!state_->alive)
      throw Error(rank_prefix() + " " + what + ": the NCCL communicator was aborted earlier (" +
                  state_->lost + ")");
    cudaEvent_t done = nullptr;
    LS_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    auto work = std::make_unique<NcclWork>(state_, done, what);
    LS_CHECK_CUDA(cudaEventRecord(done, static_cast<cudaStream_t>(stream)));
    return work;
  }

  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                              ReduceOp op) override {
    const Span span{"nccl all_reduce", count * dtype_size(type), type};
    return launch(describe("all_reduce", count, type, reduce_op_name(op)), span, count,
                  [&](const std::string& what) {
                    LS_NCCL_ISSUE(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op, size_),
                                                state_->comm, stream_),
                                  what);
                  });
  }

  WorkHandle broadcast_async(void* buf, size_t count, DType type, int root) override {
    if (root < 0 || root >= size_)
      throw Error(rank_prefix() + " broadcast root " + std::to_string(root) +
                  " is not a rank of this world of " + std::to_string(size_));
    const Span span{"nccl broadcast", count * dtype_size(type), type};
    const std::string what = describe("broadcast", count, type, "root " + std::to_string(root));
    return launch(what, span, count, [&](const std::string& w) {
      LS_NCCL_ISSUE(ncclBroadcast(buf, buf, count, nccl_type(type), root, state_->comm, stream_),
                    w);
    });
  }

  WorkHandle all_gather_async(const void* send, void* recv, size_t count, DType type) override {
    const size_t block = count * dtype_size(type);
    const char* own = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * block;
    const Span span{"nccl all_gather", block * size_, type};
    return launch(describe("all_gather", count, type, ""), span, count,
                  [&](const std::string& what) {
      // NCCL works in place only when `send` is this rank's block of `recv`; other overlapping
      // input (e.g. send == recv on rank > 0) is moved aside first.
      void* scratch = nullptr;
      const void* src = send;
      if (send != own && overlaps(send, block, recv, block * size_)) {
        LS_CHECK_CUDA(cudaMallocAsync(&scratch, block, stream_));
        LS_CHECK_CUDA(cudaMemcpyAsync(scratch, send, block, cudaMemcpyDeviceToDevice, stream_));
        src = scratch;
      }
      LS_NCCL_ISSUE(ncclAllGather(src, recv, count, nccl_type(type), state_->comm, stream_), what);
      if (scratch != nullptr) LS_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
    });
  }

  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                  ReduceOp op) override {
    const size_t block = count * dtype_size(type);
    const char* own = static_cast<const char*>(send) + static_cast<size_t>(rank_) * block;
    const Span span{"nccl reduce_scatter", block * size_, type};
    return launch(describe("reduce_scatter", count, type, reduce_op_name(op)), span, count,
                  [&](const std::string& what) {
      // In place means recv == this rank's block of send; any other overlap goes via scratch.
      if (recv != own && overlaps(recv, block, send, block * size_)) {
        void* scratch = nullptr;
        LS_CHECK_CUDA(cudaMallocAsync(&scratch, block, stream_));
        LS_NCCL_ISSUE(ncclReduceScatter(send, scratch, count, nccl_type(type), nccl_op(op, size_),
                                        state_->comm, stream_),
                      what);
        LS_CHECK_CUDA(cudaMemcpyAsync(recv, scratch, block, cudaMemcpyDeviceToDevice, stream_));
        LS_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
      } else {
        LS_NCCL_ISSUE(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op, size_),
                                        state_->comm, stream_),
                      what);
      }
    });
  }

  WorkHandle barrier_async() override {
    // max of a word that stays 0: completes only when every rank has joined, never overflows.
    return launch("nccl barrier", Span{"nccl barrier", sizeof(int32_t), DType::i32}, 1,
                  [&](const std::string& what) {
                    LS_NCCL_ISSUE(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32,
                                                ncclMax, state_->comm, stream_),
                                  what);
                  });
  }

 private:
  void init() {
    LS_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    LS_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    LS_CHECK_CUDA(cudaSetDevice(device_));
    ncclUniqueId id = unique_id_from_rank0();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t rc = ncclCommInitRankConfig(&state_->comm, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      state_->abort("ncclCommInitRankConfig failed");  // frees what NCCL may hold already
      detail::throw_nccl_error("ncclCommInitRankConfig", rc, __FILE__, __LINE__);
    }
    state_->settle("nccl init of rank " + std::to_string(rank_) + " of " + std::to_string(size_),
                   timeout());
    state_->alive = true;
    LS_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
    trace_ = std::make_unique<GpuTrace>(stream_, "GPU stream: nccl");
    LS_CHECK_CUDA(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    LS_CHECK_CUDA(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
    LS_CHECK_CUDA(cudaMallocAsync(&barrier_word_, sizeof(int32_t), stream_));
    LS_CHECK_CUDA(cudaMemsetAsync(barrier_word_, 0, sizeof(int32_t), stream_));
    barrier();
  }

  // Rank 0 makes the id; the broadcast also carries whether that worked, so that on failure
  // every rank fails at once instead of waiting for an id that never comes.
  ncclUniqueId unique_id_from_rank0() {
    struct {
      int ok;
      ncclUniqueId id;
    } msg{};
    ncclResult_t rc = ncclSuccess;
    if (rank_ == 0) {
      rc = ncclGetUniqueId(&msg.id);
      msg.ok = rc == ncclSuccess ? 1 : 0;
    }
    LS_CHECK_MPI(MPI_Bcast(&msg, sizeof(msg), MPI_BYTE, 0, MPI_COMM_WORLD));
    if (rank_ == 0) LS_CHECK_NCCL(rc);
    if (msg.ok == 0)
      throw Error(rank_prefix() + " rank 0 could not create the NCCL unique id; see its message");
    return msg.id;
  }

  // What LS_NCCL_ISSUE does with an NCCL call's return code: in progress, wait (with the
  // deadline) until it has taken effect; refused, throw its error.
  void issued(ncclResult_t rc, const char* call, const std::string& what, const char* file,
              int line) {
    if (rc == ncclInProgress) {
      state_->settle(what, timeout());
      return;
    }
    if (rc != ncclSuccess) detail::throw_nccl_error(call, rc, file, line);
  }

  // A collective's trace span: its name, the bytes it moves (as the MPI backend counts them) and
  // element type.
  struct Span {
    const char* name;
    size_t bytes;
    DType type;
  };

  // Orders the collective after the compute stream, enqueues it unless it moves nothing (ranks
  // agree on counts, so all skip together), and returns a handle on its completion event.
  template <class Enqueue>
  WorkHandle launch(std::string what, const Span& span, size_t count, Enqueue&& enqueue) {
    if (!state_->alive)
      throw Error(rank_prefix() + " " + what + ": the NCCL communicator was aborted earlier (" +
                  state_->lost + ")");
    int current = -1;
    LS_CHECK_CUDA(cudaGetDevice(&current));
    if (current != device_) LS_CHECK_CUDA(cudaSetDevice(device_));
    if (compute_stream_ != nullptr) {
      LS_CHECK_CUDA(cudaEventRecord(compute_ready_, compute_stream_));
      LS_CHECK_CUDA(cudaStreamWaitEvent(stream_, compute_ready_, 0));
    }
    if (count > 0) {
      trace_->begin(span.name, static_cast<int64_t>(span.bytes), dtype_name(span.type));
      enqueue(what);
      trace_->end();
    }
    cudaEvent_t done = nullptr;
    LS_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    auto work = std::make_unique<NcclWork>(state_, done, std::move(what));
    LS_CHECK_CUDA(cudaEventRecord(done, stream_));
    return work;
  }

  // Waits (with the deadline) for collectives nobody waited on; false if they did not finish.
  bool drain() noexcept {
    const auto start = Clock::now();
    Backoff backoff;
    for (;;) {
      cudaError_t rc = cudaStreamQuery(stream_);
      if (rc == cudaSuccess) return true;
      if (rc != cudaErrorNotReady || Clock::now() - start >= timeout()) return false;
      try {
        state_->check_async("nccl shutdown");
      } catch (const std::exception&) {
        return false;
      }
      backoff.pause();
    }
  }

  // ncclCommFinalize, polled under the deadline: true once the communicator is quiescent on every
  // rank, so that ncclCommDestroy only frees local resources.
  bool finalize() noexcept {
    const ncclResult_t rc = ncclCommFinalize(state_->comm);
    if (rc != ncclSuccess && rc != ncclInProgress) return false;
    try {
      state_->settle("nccl finalize", timeout());
      return true;
    } catch (const std::exception&) {
      return false;  // settle has aborted the communicator
    }
  }

  void release(bool failing) noexcept {
    if (state_->alive && !failing && stream_ != nullptr && drain() && state_->alive &&
        finalize()) {
      ncclCommDestroy(state_->comm);
      state_->forget("the communicator was destroyed");
    }
    // Anything short of that clean path (pending or failed collectives, unwinding, a failed
    // initialisation) is the bounded abort.
    if (state_->comm != nullptr)
      state_->abort("the communicator was destroyed with collectives pending");
    // Stream-ordered and event resources: none of these waits for the device. The trace keeps
    // the spans that completed (all of them after a clean drain) before the stream goes.
    trace_.reset();
    if (barrier_word_ != nullptr) cudaFreeAsync(barrier_word_, stream_);
    if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
    if (joined_ != nullptr) cudaEventDestroy(joined_);
    joined_ = nullptr;
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    barrier_word_ = nullptr;
    compute_ready_ = nullptr;
    stream_ = nullptr;
  }

  int device_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<NcclState> state_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GpuTrace> trace_;  // device spans of stream_'s collectives
  cudaStream_t compute_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;  // re-recorded on the compute stream before each collective
  cudaEvent_t joined_ = nullptr;         // re-recorded on stream_ by join_stream()
  void* barrier_word_ = nullptr;
};

#undef LS_NCCL_ISSUE

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(int device, Millis timeout) {
  return std::make_unique<NcclCommunicator>(device, timeout);
}

}  // namespace lockstep
