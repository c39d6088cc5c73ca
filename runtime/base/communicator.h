// Communicator: the collectives every rank of a job takes part in (DESIGN.md decision 2).
//
// All calls must happen in the same order on all ranks. Each collective has an async form that
// returns a Work handle; the blocking form is the async form followed by wait(timeout()), or a
// backend's cheaper route to the same result under the same deadline (mpi: small host collectives
// on the calling thread). A wait past its deadline throws TimeoutError naming the collective and
// the rank instead of hanging; the job is then beyond repair and the top-level handler aborts it.
//
// Buffers: `send` may equal `recv` (in place). Counts are elements. For all_gather and
// reduce_scatter, `count` is the per-rank block; the full buffer holds size() blocks in rank order.
// Mean of integers is the sum divided by size(), rounded toward 0.
//
// Backends: "mpi" (host buffers, or device buffers staged through host memory when created with
// device_buffers) and "nccl" (device buffers only, own CUDA stream; a host pointer is an error).
// A backend that is not built is a stub whose factory throws a message saying so. Not
// thread-safe: one thread issues collectives.
//
// bf16/f16 reductions differ by backend. mpi: each rank's values are widened to float32, reduced
// in float32 and rounded to 16 bits once at the end. nccl: summed natively in bf16/f16, so every
// partial sum is rounded to 16 bits (a mean then divides the sum in float32 and rounds once) (with
// many ranks or large magnitudes the result can differ from the mpi backend's by more than one
// 16-bit ulp); a caller that needs float32 accumulation over NCCL reduces a float32 buffer.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/base/dtype.h"

namespace lockstep {

enum class ReduceOp { sum, mean, max, min };
const char* reduce_op_name(ReduceOp op);

enum class Backend { mpi, nccl };
const char* backend_name(Backend b);
Backend parse_backend(const std::string& text);  // "mpi" | "nccl"; throws UsageError

using Millis = std::chrono::milliseconds;
constexpr Millis kDefaultCollectiveTimeout{60'000};

// A pending collective. wait() returns when it is complete (its output may be read), throws
// TimeoutError past the deadline, or Error if it failed.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait(Millis timeout) = 0;
  virtual bool done() = 0;  // non-blocking check
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  // Whether buffers passed in must be CUDA device memory (nccl; mpi created with device_buffers).
  // Code that reduces host values checks this (agree.h: require_host_buffers).
  virtual bool device_buffers() const { return backend() == Backend::nccl; }

  virtual WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                                      ReduceOp op) = 0;
  virtual WorkHandle broadcast_async(void* buf, size_t count, DType type, int root) = 0;
  virtual WorkHandle all_gather_async(const void* send, void* recv, size_t count, DType type) = 0;
  virtual WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                          ReduceOp op) = 0;
  virtual WorkHandle barrier_async() = 0;

  // From now on each collective starts only after the work queued on `stream` before it was issued
  // (the cudaStream_t that computes the buffers, e.g. a Step's placement stream; null: none). The
  // NCCL backend orders its stream by an event, without blocking the host; host backends ignore it.
  virtual void set_compute_stream(void* /*stream*/) {}

  // CUDA graphs (DESIGN.md decision 18). Whether collectives on device buffers may be issued while
  // the compute stream is being captured into a CUDA graph, becoming part of the graph (nccl: its
  // stream joins the capture through the compute stream's event). False for host buffers and for
  // device buffers staged through the host (mpi), whose copies wait for the host.
  virtual bool capturable() const { return false; }
  // Makes `stream` wait, on the device, for every collective issued so far: the host does not
  // wait. Where capturable(), a capture of `stream` that issued collectives must call it before
  // it ends (it joins their stream back into the capture).
  virtual void join_stream(void* stream);
  // A handle that is complete once the work queued on `stream` so far has run; its wait watches
  // this communicator as a collective's wait does (nccl: past the deadline, or on an asynchronous
  // error such as a dead peer, the communicator is aborted and the wait throws naming `what`), for
  // collectives that run inside a CUDA graph launched on `stream`.
  virtual WorkHandle watch_stream(void* stream, const std::string& what);
  // Why this communicator can take no more collectives (nccl: aborted after a timeout or a failed
  // peer); empty while it can.
  virtual std::string lost() const { return ""; }
  // Whether no collective issued here may still read or write its buffers: none queued, running,
  // or given up on at its deadline and still started (MPI cannot cancel one). Owners of buffers
  // handed to collectives free them only when it holds (the Trainer keeps them otherwise: a rank
  // failing mid-step ends the process). The host's view: device work is the stream's (nccl).
  virtual bool quiet() { return true; }

  virtual void all_reduce(const void* send, void* recv, size_t count, DType type, ReduceOp op) {
    all_reduce_async(send, recv, count, type, op)->wait(timeout_);
  }
  virtual void broadcast(void* buf, size_t count, DType type, int root) {
    broadcast_async(buf, count, type, root)->wait(timeout_);
  }
  virtual void all_gather(const void* send, void* recv, size_t count, DType type) {
    all_gather_async(send, recv, count, type)->wait(timeout_);
  }
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType type, ReduceOp op) {
    reduce_scatter_async(send, recv, count, type, op)->wait(timeout_);
  }
  virtual void barrier() { barrier_async()->wait(timeout_); }

  // Typed conveniences for host code.
  template <class T>
  void all_reduce_inplace(T* buf, size_t count, ReduceOp op) {
    all_reduce(buf, buf, count, dtype_of<T>(), op);
  }

  Millis timeout() const { return timeout_; }
  void set_timeout(Millis t) { timeout_ = t; }

 private:
  Millis timeout_ = kDefaultCollectiveTimeout;
};

struct MpiCommOptions {
  // Buffers passed in are CUDA device memory: stage them through host memory (lets several ranks
  // share one GPU, which NCCL refuses). Needs the CUDA build.
  bool device_buffers = false;
};

// MPI backend over a duplicate of MPI_COMM_WORLD. Collectives run in order on a progress thread
// (MPI_THREAD_MULTIPLE), so the host is free while they run and waits can have deadlines. A
// blocking all_reduce, broadcast or barrier of at most 64 KiB of host memory runs on the calling
// thread instead, once the collectives issued before it have completed (nonblocking MPI calls
// polled against the deadline: about as fast as a plain MPI_Allreduce for 8 bytes, instead of
// several times slower; comm/mpi_inline.h).
std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommOptions& options = {});

// NCCL backend on CUDA device `device`: rank 0's ncclGetUniqueId reaches every rank by a broadcast
// over a temporary MPI communicator of the world (comm/nccl_bootstrap.h takes the caller's host
// communicator instead), then a non-blocking ncclCommInitRankConfig and a barrier, each of which
// must complete within `timeout` (also the collectives' timeout()): a rank that never joins makes
// the others throw TimeoutError. A wait that times out aborts the communicator, and ends the job at
// once should the abort itself hang (comm_nccl.cu says why). Throws UsageError where NCCL is not
// built.
bool nccl_available();
std::unique_ptr<Communicator> make_nccl_communicator(int device,
                                                     Millis timeout = kDefaultCollectiveTimeout);

}  // namespace lockstep
