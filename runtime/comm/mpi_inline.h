// Small collectives of the MPI backend (DESIGN.md decision 2): all_reduce, broadcast and barrier
// of at most kInlineMaxBytes of host memory.
//
// A blocking all_reduce of 8 bytes costs about 0.6 us as a plain MPI_Allreduce and several times
// that through the progress thread (queue, wake-up, condition variable). So the blocking form of a
// small collective runs on the calling thread once every collective issued before it has
// completed (MpiCommunicator waits for the progress thread to empty first, within the deadline):
// it starts MPI's own nonblocking collective (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier: the
// library's algorithms, not ours) and polls it with MPI_Test until it completes or the deadline
// passes. A missed deadline throws the same TimeoutError as the progress thread's wait (the
// collective, the rank, the deadline). The async form of a small collective runs the same code on
// the progress thread, without a deadline (its waiter has one).
//
// Why every small collective takes the nonblocking call, on either thread: MPI does not match a
// blocking collective on one rank with a nonblocking one on another, and one rank may issue the
// blocking form where another issues the async form. Ordering: every rank starts its collectives
// in the order they were issued (the calling thread starts one only when nothing is in flight).
// Threads: the two threads never call MPI at once (the progress thread is idle while the calling
// thread runs one), so this needs no more than MPI_THREAD_SERIALIZED; with less there is no
// progress thread at all.
//
// A collective given up on at its deadline stays started: its request (and any staging buffer
// it writes) is kept here, and reaped once it completes (a late peer joins: later collectives
// drive it). While one is pending the communicator must not be freed (abandoned_pending()).
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
  InlineCollectives(MPI_Comm comm, int size) : comm_(comm), size_(size) {}

  void all_reduce(const void* send, void* recv, size_t count, DType type, ReduceOp op,
                  const Deadline& deadline);
  void broadcast(void* buf, size_t count, DType type, int root, const Deadline& deadline);
  void barrier(const Deadline& deadline);

  // Whether a collective given up on at its deadline is still incomplete (tests it first).
  bool abandoned_pending();

 private:
  // A started collective: its request and the float32 staging buffer of a 16-bit reduction.
  struct Started {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<float> wide;
  };

  // Polls until `s` completes; past the deadline keeps it in abandoned_ and throws TimeoutError
  // naming the collective (what() builds the name only then).
  template <class Name>
  void finish(Started& s, const Deadline& deadline, const Name& what);

  MPI_Comm comm_;
  int size_;
  std::vector<Started> abandoned_;
};

}  // namespace lockstep::mpi_detail
