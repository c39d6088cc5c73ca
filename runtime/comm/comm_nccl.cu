// NCCL backend of Communicator (DESIGN.md decisions 2 and 3); stands in for comm_nccl_stub.cpp.
//
// Bootstrap: rank 0's ncclGetUniqueId reaches every rank by a broadcast over the host communicator
// under its deadline (nccl_bootstrap.h: a rank 0 that is slow or stuck before it gets there fails
// the others with a TimeoutError); every rank creates its communicator on its device with
// ncclCommInitRankConfig in NCCL's non-blocking mode (config.blocking = 0) and polls it under the
// communicator's timeout, so a rank that never joins fails the others with a TimeoutError instead
// of hanging them; then a barrier (NCCL has none: a one-word all-reduce).
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
// precision (each addition rounds). Mean is ncclSum followed, at 2+ ranks, by a division by the
// world size on the communicator's stream, as the MPI backend does it: floats divided in their own
// precision, bf16/f16 widened to float32, divided and rounded once, integers divided rounding
// toward zero. Not ncclAvg: it multiplies each element by 1/size rounded to the element type
// before summing (a bf16 1/3 is 0.3340, so a mean of ones at 3 ranks came out 1.0020), and NCCL
// 2.28's one-rank ncclAvg left 3 of 2^20 + 3 floats of an out-of-place all_reduce or
// reduce_scatter unwritten on an H200 (collectives_gpu_test).
//
// Events: each collective's Work handle polls an event taken from a pool that the handles give
// back, so a step's collectives create no CUDA events after the first steps.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <sstream>
#include <vector>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/launch.cuh"
#include "runtime/base/communicator.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/nccl_bootstrap.h"
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
    case ncclRemoteError: return "a peer rank failed or exited; look at the other ranks' output";
    default: return "rerun with NCCL_DEBUG=WARN for NCCL's own account";
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

// Mean is a sum here, divided afterwards (divide_by_size).
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// x[i] = x[i] / by, computed as the MPI backend computes a mean from a sum (mpi_ops.h).
template <class T>
__global__ void divide_kernel(T* x, size_t n, T by) {
  for (size_t i = kernels::cuda::thread_index(); i < n; i += kernels::cuda::thread_stride())
    x[i] = static_cast<T>(x[i] / by);
}
__global__ void divide_bf16_kernel(uint16_t* x, size_t n, float by) {
  using kernels::cuda::from_bf16;
  using kernels::cuda::to_bf16;
  for (size_t i = kernels::cuda::thread_index(); i < n; i += kernels::cuda::thread_stride())
    x[i] = to_bf16(from_bf16(x[i]) / by);
}
__global__ void divide_f16_kernel(__half* x, size_t n, float by) {
  for (size_t i = kernels::cuda::thread_index(); i < n; i += kernels::cuda::thread_stride())
    x[i] = __float2half_rn(__half2float(x[i]) / by);
}

template <class T>
void divide_as(void* x, size_t n, T by, cudaStream_t stream) {
  divide_kernel<T><<<kernels::cuda::grid_for(n), kernels::cuda::kThreads, 0, stream>>>(
      static_cast<T*>(x), n, by);
}

// Turns the sum of `size` ranks in x[0, n) into their mean, on `stream` after the sum.
void divide_by_size(void* x, size_t n, DType type, int size, cudaStream_t stream) {
  if (size == 1 || n == 0) return;
  const unsigned grid = kernels::cuda::grid_for(n);
  constexpr int threads = kernels::cuda::kThreads;
  switch (type) {
    case DType::f32: divide_as<float>(x, n, static_cast<float>(size), stream); break;
    case DType::f64: divide_as<double>(x, n, static_cast<double>(size), stream); break;
    case DType::i32: divide_as<int32_t>(x, n, size, stream); break;
    case DType::i64: divide_as<int64_t>(x, n, size, stream); break;
    case DType::u8: divide_as<uint8_t>(x, n, static_cast<uint8_t>(size), stream); break;
    case DType::bf16:
      divide_bf16_kernel<<<grid, threads, 0, stream>>>(static_cast<uint16_t*>(x), n,
                                                       static_cast<float>(size));
      break;
    case DType::f16:
      divide_f16_kernel<<<grid, threads, 0, stream>>>(static_cast<__half*>(x), n,
                                                      static_cast<float>(size));
      break;
  }
  LS_CHECK_CUDA(cudaGetLastError());
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
  // `host` carries the unique id (its ranks are this communicator's); null: a temporary MPI
  // communicator over the world does.
  NcclCommunicator(int device, Millis timeout, Communicator* host)
      : device_(device), state_(std::make_shared<NcclState>()) {
    set_timeout(timeout);
    state_->device = device;
    try {
      init(host);
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

  std::string lost() const override { return state_->lost; }

  WorkHandle watch_stream(void* stream, const std::string& what) override {
    if (!state_->alive)
      throw Error(rank_prefix() + " " + what + ": the NCCL communicator was aborted earlier (" +
                  state_->lost + ")");
    auto work = std::make_unique<NcclWork>(state_, state_->take_event(), what);
    LS_CHECK_CUDA(cudaEventRecord(work->event(), static_cast<cudaStream_t>(stream)));
    return work;
  }

  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                              ReduceOp op) override {
    const Span span{"nccl all_reduce", count * dtype_size(type), type};
    return launch(describe("all_reduce", count, type, reduce_op_name(op)), span, count,
                  [&](const std::string& what) {
                    LS_NCCL_ISSUE(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op),
                                                state_->comm, stream_),
                                  what);
                    if (op == ReduceOp::mean) divide_by_size(recv, count, type, size_, stream_);
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
    return launch(
        describe("all_gather", count, type, ""), span, count, [&](const std::string& what) {
          // NCCL works in place only when `send` is this rank's block of `recv`; other overlapping
          // input (e.g. send == recv on rank > 0) is moved aside first.
          void* scratch = nullptr;
          const void* src = send;
          if (send != own && overlaps(send, block, recv, block * size_)) {
            LS_CHECK_CUDA(cudaMallocAsync(&scratch, block, stream_));
            LS_CHECK_CUDA(cudaMemcpyAsync(scratch, send, block, cudaMemcpyDeviceToDevice, stream_));
            src = scratch;
          }
          LS_NCCL_ISSUE(ncclAllGather(src, recv, count, nccl_type(type), state_->comm, stream_),
                        what);
          if (scratch != nullptr) LS_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
        });
  }

  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                  ReduceOp op) override {
    const size_t block = count * dtype_size(type);
    const char* own = static_cast<const char*>(send) + static_cast<size_t>(rank_) * block;
    const Span span{"nccl reduce_scatter", block * size_, type};
    return launch(
        describe("reduce_scatter", count, type, reduce_op_name(op)), span, count,
        [&](const std::string& what) {
          // In place means recv == this rank's block of send; any other overlap goes via scratch.
          if (recv != own && overlaps(recv, block, send, block * size_)) {
            void* scratch = nullptr;
            LS_CHECK_CUDA(cudaMallocAsync(&scratch, block, stream_));
            LS_NCCL_ISSUE(ncclReduceScatter(send, scratch, count, nccl_type(type), nccl_op(op),
                                            state_->comm, stream_),
                          what);
            LS_CHECK_CUDA(cudaMemcpyAsync(recv, scratch, block, cudaMemcpyDeviceToDevice, stream_));
            LS_CHECK_CUDA(cudaFreeAsync(scratch, stream_));
          } else {
            LS_NCCL_ISSUE(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op),
                                            state_->comm, stream_),
                          what);
          }
          if (op == ReduceOp::mean) divide_by_size(recv, count, type, size_, stream_);
        });
  }

  WorkHandle barrier_async() override {
    // max of a word that stays 0: completes only when every rank has joined, never overflows.
    return launch("nccl barrier", Span{"nccl barrier", sizeof(int32_t), DType::i32}, 1,
                  [&](const std::string& what) {
                    LS_NCCL_ISSUE(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclMax,
                                                state_->comm, stream_),
                                  what);
                  });
  }

 private:
  void init(Communicator* host) {
    std::unique_ptr<Communicator> own_host;
    if (host == nullptr) {
      own_host = make_mpi_communicator();
      own_host->set_timeout(timeout());
      host = own_host.get();
    }
    require_host_buffers(*host, "the NCCL unique id's broadcast");
    rank_ = host->rank();
    size_ = host->size();
    LS_CHECK_CUDA(cudaSetDevice(device_));
    ncclUniqueId id = unique_id_from_rank0(*host);
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

  // Rank 0 makes the id; every rank gets it over `host`, under its deadline.
  static ncclUniqueId unique_id_from_rank0(Communicator& host) {
    ncclUniqueId id{};
    const std::vector<unsigned char> bytes =
        broadcast_unique_id(host, sizeof id, [](void* out) -> std::string {
          const ncclResult_t rc = ncclGetUniqueId(static_cast<ncclUniqueId*>(out));
          if (rc == ncclSuccess) return "";
          return std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(rc) +
                 " (hint: " + detail::nccl_hint(rc) + ")";
        });
    std::memcpy(&id, bytes.data(), sizeof id);
    return id;
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
    auto work = std::make_unique<NcclWork>(state_, state_->take_event(), std::move(what));
    LS_CHECK_CUDA(cudaEventRecord(work->event(), stream_));
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
    if (state_->alive && !failing && stream_ != nullptr && drain() && state_->alive && finalize()) {
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
  return std::make_unique<NcclCommunicator>(device, timeout, nullptr);
}

std::unique_ptr<Communicator> make_nccl_communicator(int device, Millis timeout,
                                                     Communicator& host) {
  return std::make_unique<NcclCommunicator>(device, timeout, &host);
}

}  // namespace lockstep
