// NCCL backend of Communicator (DESIGN.md decisions 2 and 3); stands in for comm_nccl_stub.cpp.
//
// Bootstrap: rank 0's ncclGetUniqueId reaches every rank by MPI_Bcast, every rank calls
// ncclCommInitRank on its device, then a barrier (NCCL has none: a one-word all-reduce).
//
// Streams: collectives run on the communicator's own stream. Before each one that stream waits on
// an event recorded on the compute stream (set_compute_stream), so a collective reads buffers only
// after the kernels that wrote them, and the host does not block; after it, an event is recorded
// that the Work handle polls. Both streams are blocking streams, so work on the legacy default
// stream (plain cudaMemcpy uploads) is ordered before them as well.
//
// Trace: while --trace records, each collective is also a span timed by the device on the track
// "GPU stream: nccl" (gpu_trace.h), from when the stream starts it (after the compute stream's
// event) to when it finishes, with its bytes and dtype.
//
// Watchdog: wait() polls that event and ncclCommGetAsyncError. Past the deadline, or on an async
// error, it aborts the communicator (ncclCommAbort) and throws, naming the collective and the rank;
// no rank hangs inside NCCL. An aborted communicator refuses every later call.
//
// Differences from the MPI backend a caller may see: bf16/f16 are reduced by NCCL in their own
// precision (each addition rounds); mean is ncclAvg (floats: sum pre-multiplied by 1/size;
// integers: sum, then division rounded toward zero, as the interface promises).
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <sstream>
#include <thread>

#include "runtime/communicator.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/gpu_trace.h"

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

using Clock = std::chrono::steady_clock;

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

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::mean: return ncclAvg;
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

// Polling pace: yield for the first 2 ms (most collectives finish by then, and their measured
// time stays exact), then sleep 1/50 of the time waited so far, capped at 1 ms: a long wait costs
// little CPU, overshoots its completion by at most 2%, and checks the deadline every millisecond.
class Backoff {
 public:
  void pause() {
    auto waited = Clock::now() - start_;
    if (waited < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(waited / 50, std::chrono::milliseconds(1)));
  }

 private:
  Clock::time_point start_ = Clock::now();
};

// The NCCL communicator, shared by NcclCommunicator and its Work handles: a handle may be waited
// on after the communicator failed, and must then say so instead of touching a freed comm.
struct NcclState {
  ncclComm_t comm = nullptr;
  bool alive = false;  // initialised, neither aborted nor destroyed
  std::string lost;    // why it is not alive any more

  void abort(const std::string& why) {
    if (alive) ncclCommAbort(comm);  // frees it and stops its kernels; nothing useful to check
    alive = false;
    comm = nullptr;
    if (lost.empty()) lost = why;
  }

  // Throws Error when NCCL reports an asynchronous failure (a peer died, a network error), after
  // aborting the communicator so that nothing else waits on it.
  void check_async(const std::string& what) {
    if (!alive) return;
    ncclResult_t async = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &async);
    if (rc != ncclSuccess) async = rc;
    if (async == ncclSuccess || async == ncclInProgress) return;
    std::string reason = ncclGetErrorString(async);
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') reason += std::string(" (") + last + ")";
    abort(what + " failed: " + reason);
    throw Error(rank_prefix() + " " + what + " failed: " + reason +
                "; the NCCL communicator was aborted (hint: " + detail::nccl_hint(async) + ")");
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t event, std::string what)
      : state_(std::move(state)), event_(event), what_(std::move(what)) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  bool done() override { return poll(); }

  void wait(Millis timeout) override {
    const auto start = Clock::now();
    Backoff backoff;
    while (!poll()) {
      if (Clock::now() - start >= timeout) {
        state_->abort(what_ + " timed out");
        std::ostringstream os;
        os << rank_prefix() << " " << what_ << " did not complete within "
           << std::chrono::duration<double>(timeout).count()
           << " s: a peer rank has died, stalled, or skipped this collective; the NCCL "
              "communicator was aborted";
        throw TimeoutError(os.str());
      }
      backoff.pause();
    }
  }

 private:
  // True once the collective has completed; throws if it cannot any more.
  bool poll() {
    if (complete_) return true;
    cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaSuccess) return complete_ = true;
    if (rc != cudaErrorNotReady) {
      cudaGetLastError();
      state_->abort(what_ + " failed on the GPU");
      throw_call_error(what_.c_str(),
                       std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc),
                       __FILE__, __LINE__, "the GPU failed while the collective ran");
    }
    if (!state_->alive)
      throw Error(rank_prefix() + " " + what_ + " cannot complete: the NCCL communicator was " +
                  "aborted (" + state_->lost + ")");
    state_->check_async(what_);
    return false;
  }

  std::shared_ptr<NcclState> state_;
  cudaEvent_t event_;
  std::string what_;
  bool complete_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(int device) : device_(device), state_(std::make_shared<NcclState>()) {
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

  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                              ReduceOp op) override {
    const Span span{"nccl all_reduce", count * dtype_size(type), type};
    return launch(describe("all_reduce", count, type, reduce_op_name(op)), span, count, [&] {
      LS_CHECK_NCCL(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), state_->comm,
                                  stream_));
    });
  }

  WorkHandle broadcast_async(void* buf, size_t count, DType type, int root) override {
    if (root < 0 || root >= size_)
      throw Error(rank_prefix() + " broadcast root " + std::to_string(root) +
                  " is not a rank of this world of " + std::to_string(size_));
    const Span span{"nccl broadcast", count * dtype_size(type), type};
    const std::string what = describe("broadcast", count, type, "root " + std::to_string(root));
    return launch(what, span, count, [&] {
      LS_CHECK_NCCL(ncclBroadcast(buf, buf, count, nccl_type(type), root, state_->comm, stream_));
    });
  }

  WorkHandle all_gather_async(const void* send, void* recv, size_t count, DType type) override {
    const size_t block = count * dtype_size(type);
    const char* own = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * block;
    const Span span{"nccl all_gather", block * size_, type};
    return launch(describe("all_gather", count, type, ""), span, count, [&] {
      // NCCL works in place only when `send` is this rank's block of `recv`; other overlapping
      // input (e.g. send == recv on rank > 0) is moved aside first.
      void* scratch = nullptr;
      const void* src = send;
      if (send != own && overlaps(send, block, recv, block * size_)) {
        LS_CHECK_CUDA(cudaMallocAsync(&scratch, block, stream_));
        LS_CHECK_CUDA(cudaMemcpyAsync(scratch, send, block, cudaMemcpyDeviceToDevice, stream_));
        src = scratch;
      }
      LS_CHECK_NCCL(ncclAllGather(src, recv, count, nccl_type(type), state_->comm, stream_));
      if (scratch != nullptr) LS_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
    });
  }

  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                  ReduceOp op) override {
    const size_t block = count * dtype_size(type);
    const char* own = static_cast<const char*>(send) + static_cast<size_t>(rank_) * block;
    const Span span{"nccl reduce_scatter", block * size_, type};
    return launch(describe("reduce_scatter", count, type, reduce_op_name(op)), span, count, [&] {
      // In place means recv == this rank's block of send; any other overlap goes via scratch.
      if (recv != own && overlaps(recv, block, send, block * size_)) {
        void* scratch = nullptr;
        LS_CHECK_CUDA(cudaMallocAsync(&scratch, block, stream_));
        LS_CHECK_NCCL(ncclReduceScatter(send, scratch, count, nccl_type(type), nccl_op(op),
                                        state_->comm, stream_));
        LS_CHECK_CUDA(cudaMemcpyAsync(recv, scratch, block, cudaMemcpyDeviceToDevice, stream_));
        LS_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
      } else {
        LS_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op),
                                        state_->comm, stream_));
      }
    });
  }

  WorkHandle barrier_async() override {
    // max of a word that stays 0: completes only when every rank has joined, never overflows.
    return launch("nccl barrier", Span{"nccl barrier", sizeof(int32_t), DType::i32}, 1, [&] {
      LS_CHECK_NCCL(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclMax,
                                  state_->comm, stream_));
    });
  }

 private:
  void init() {
    LS_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    LS_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    LS_CHECK_CUDA(cudaSetDevice(device_));
    ncclUniqueId id = unique_id_from_rank0();
    LS_CHECK_NCCL(ncclCommInitRank(&state_->comm, size_, id, rank_));
    state_->alive = true;
    LS_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
    trace_ = std::make_unique<GpuTrace>(stream_, "GPU stream: nccl");
    LS_CHECK_CUDA(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    LS_CHECK_CUDA(cudaMallocAsync(&barrier_word_, sizeof(int32_t), stream_));
    LS_CHECK_CUDA(cudaMemsetAsync(barrier_word_, 0, sizeof(int32_t), stream_));
    barrier();
  }

  // Rank 0 makes the id; the broadcast also carries whether that worked, so that on failure
  // every rank fails at once instead of waiting in ncclCommInitRank for an id that never comes.
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
      enqueue();
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

  void release(bool failing) noexcept {
    if (state_->alive) {
      if (!failing && stream_ != nullptr && drain() && state_->alive) {
        ncclCommDestroy(state_->comm);
        state_->alive = false;
        state_->comm = nullptr;
        state_->lost = "the communicator was destroyed";
      } else {
        state_->abort("the communicator was destroyed with collectives pending");
      }
    }
    // Stream-ordered and event resources: none of these waits for the device. The trace keeps
    // the spans that completed (all of them after a clean drain) before the stream goes.
    trace_.reset();
    if (barrier_word_ != nullptr) cudaFreeAsync(barrier_word_, stream_);
    if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
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
  void* barrier_word_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(int device) {
  return std::make_unique<NcclCommunicator>(device);
}

}  // namespace lockstep
