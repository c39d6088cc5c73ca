// Small collectives of the MPI backend (DESIGN.md decision 2): all_reduce and broadcast of at
// most kInlineMaxBytes of host memory, and barrier.
//
// A blocking all_reduce of 8 bytes costs well under a microsecond as a plain MPI_Allreduce and
// several times that through the progress thread (queue, wake-up, condition variable). So the
// blocking form of a small collective runs on the calling thread once every collective issued
// before it has completed (MpiCommunicator waits for the progress thread to empty first, within the
// deadline), polling nonblocking MPI calls with MPI_Test until they complete or the deadline
// passes. A missed deadline throws the same TimeoutError as the progress thread's wait (the
// collective, the rank, the deadline). The async form of a small collective runs the same code on
// the progress thread, without a deadline (its waiter has one).
//
// all_reduce is recursive doubling over MPI_Isend/MPI_Irecv with MPI_Reduce_local (MPI's own
// reduction ops); broadcast and barrier are MPI_Ibcast and MPI_Ibarrier. Why not MPI_Iallreduce:
// in Open MPI 4.1 it was about twice as slow for 8 bytes at 2 ranks, and slower still in some
// process launches (docs/PERFORMANCE.md, "Small messages"). Every rank
// computes the same bits: each pair combines (lower rank's value) op (higher rank's value).
//
// Why the progress thread runs the same code for small async forms: one rank may issue the
// blocking form where another issues the async one, and both must take part in the same exchange
// (MPI would not match a blocking collective with a nonblocking one either). Ordering: every rank
// starts its collectives in the order they were issued (the calling thread starts one only when
// nothing is in flight); each all_reduce's messages carry its own tag, the next in a sequence every
// rank counts alike, on the communicator's private duplicate. Threads: the two threads never call
// MPI at once (the progress thread is idle while the calling thread runs one), so this needs no
// more than MPI_THREAD_SERIALIZED; with less there is no progress thread at all.
//
// A collective given up on at its deadline stays started: its requests (and any buffer they
// write) are kept here, and reaped once they complete (a late peer joins: later collectives
// drive them). While one is pending the communicator must not be freed (abandoned_pending()).
// Not thread-safe: one thread issues collectives.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"

namespace lockstep::mpi_detail {

// Host collectives up to this size are small.
constexpr size_t kInlineMaxBytes = size_t{64} << 10;

// When a wait gives up, and the timeout its message names. none(): never (the progress thread).
struct Deadline {
  std::chrono::steady_clock::time_point at;
  Millis timeout;
  static Deadline after(Millis timeout) {
    using Clock = std::chrono::steady_clock;
    const auto now = Clock::now();
    if (timeout >= std::chrono::duration_cast<Millis>(Clock::time_point::max() - now))
      return {Clock::time_point::max(), timeout};  // beyond the clock's range: never
    return {now + timeout, timeout};
  }
  static Deadline none() { return {std::chrono::steady_clock::time_point::max(), Millis::max()}; }
};

class InlineCollectives {
 public:
  InlineCollectives(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

  void all_reduce(const void* send, void* recv, size_t count, DType type, ReduceOp op,
                  const Deadline& deadline);
  void broadcast(void* buf, size_t count, DType type, int root, const Deadline& deadline);
  void barrier(const Deadline& deadline);

  // Whether a collective given up on at its deadline is still incomplete (tests it first).
  bool abandoned_pending();

 private:
  // A started collective or exchange step: its requests (a receive and a send, or one request
  // in [0]), and the buffers they may still read or write, never the caller's: the values being
  // reduced (float32 staging of a 16-bit reduction, else a copy of the input), the receive buffer
  // of the exchange, a broadcast's staging.
  struct Started {
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    std::vector<float> wide;
    std::vector<unsigned char> values;
    std::vector<unsigned char> scratch;
  };

  // The collective about to start: spare_, its buffers kept from the last one (no allocation
  // for a collective no larger than the last), its requests none.
  Started& start();

  // Polls until `s` completes; past the deadline keeps it in abandoned_ and throws TimeoutError
  // naming the collective (what() builds the name only then).
  template <class Name>
  void finish(Started& s, const Deadline& deadline, const Name& what);

  // Recursive doubling over point-to-point messages; `acc` (in `s`, whose buffers outlive a
  // collective given up on) holds this rank's `n` values of `t`. Returns where the reduction over
  // all ranks lies, identical on every rank: `acc` or s.scratch.
  template <class Name>
  void* recursive_doubling(Started& s, void* acc, int n, MPI_Datatype t, MPI_Op op,
                           const Deadline& deadline, const Name& what);

  MPI_Comm comm_;
  int rank_;
  int size_;
  unsigned tag_ = 0;  // one per all_reduce, the same sequence on every rank
  std::vector<Started> abandoned_;
  Started spare_;  // the buffers of the collective in progress (moved to abandoned_ if given up)
};

}  // namespace lockstep::mpi_detail
