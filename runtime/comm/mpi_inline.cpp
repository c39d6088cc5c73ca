// Small collectives: nonblocking MPI calls (a recursive-doubling exchange for all_reduce,
// MPI_Ibcast, MPI_Ibarrier) polled against the deadline (mpi_inline.h says when they are used, why
// the exchange is our own, and why this keeps the ordering).
#include "runtime/comm/mpi_inline.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/comm/mpi_ops.h"
#include "runtime/observe/trace.h"

namespace lockstep::mpi_detail {

namespace {

// How a wait polls. A peer that is moments behind is met fastest by spinning on MPI_Test; one
// that is far behind (a straggler, a checkpoint, a dead rank) should not hold a core its siblings
// need: after kYieldAfter each poll yields the core, after kNapAfter it sleeps kNap between polls
// (at most about 1% added to a wait that long).
constexpr auto kYieldAfter = std::chrono::microseconds(50);
constexpr auto kNapAfter = std::chrono::milliseconds(10);
constexpr auto kNap = std::chrono::microseconds(50);
constexpr int kPollsBeforeClock = 32;

}  // namespace

template <class Name>
void InlineCollectives::finish(Started& s, const Deadline& deadline, const Name& what) {
  int flag = 0;
  // A peer already there answers within a few polls: those need no clock (a few microseconds).
  for (int k = 0; k < kPollsBeforeClock; ++k) {
    LS_CHECK_MPI(MPI_Testall(2, s.requests, &flag, MPI_STATUSES_IGNORE));
    if (flag) return;
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    LS_CHECK_MPI(MPI_Testall(2, s.requests, &flag, MPI_STATUSES_IGNORE));
    if (flag) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline.at) {
      // MPI cannot cancel a started collective: keep its request and buffer until it completes.
      abandoned_.push_back(std::move(s));
      throw missed_deadline(what(), deadline.timeout);
    }
    if (now - start > kNapAfter)
      std::this_thread::sleep_for(kNap);
    else if (now - start > kYieldAfter)
      std::this_thread::yield();
  }
}

InlineCollectives::Started& InlineCollectives::start() {
  spare_.requests[0] = spare_.requests[1] = MPI_REQUEST_NULL;  // handles moved to abandoned_
  return spare_;
}

bool InlineCollectives::abandoned_pending() {
  for (auto it = abandoned_.begin(); it != abandoned_.end();) {
    int flag = 0;
    if (MPI_Testall(2, it->requests, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS && flag)
      it = abandoned_.erase(it);
    else
      ++it;
  }
  return !abandoned_.empty();
}

template <class Name>
void* InlineCollectives::recursive_doubling(Started& s, void* acc, int n, MPI_Datatype t, MPI_Op op,
                                            const Deadline& deadline, const Name& what) {
  int es = 0;
  MPI_Type_size(t, &es);
  const size_t bytes = static_cast<size_t>(n) * es;
  s.scratch.resize(bytes);
  void* tmp = s.scratch.data();
  const int tag = static_cast<int>(tag_++ & 0x7fff);  // MPI guarantees tags up to 32767
  // One step: receive from `from` into `into` and send `what_to_send` to `to` (-1: none), done.
  auto step = [&](int to, const void* what_to_send, int from, void* into) {
    if (from >= 0) LS_CHECK_MPI(MPI_Irecv(into, n, t, from, tag, comm_, &s.requests[0]));
    if (to >= 0) LS_CHECK_MPI(MPI_Isend(what_to_send, n, t, to, tag, comm_, &s.requests[1]));
    finish(s, deadline, what);
  };
  // acc := (lower rank's value) op (higher rank's value), on both sides of a pair, so that every
  // rank computes the same bits even where `op` is not exactly commutative (max with a NaN).
  auto combine = [&](int peer) {
    if (rank_ < peer) {
      LS_CHECK_MPI(MPI_Reduce_local(acc, tmp, n, t, op));
      std::swap(acc, tmp);
    } else {
      LS_CHECK_MPI(MPI_Reduce_local(tmp, acc, n, t, op));
    }
  };
  int pof2 = 1;
  while (pof2 * 2 <= size_) pof2 *= 2;
  const int rem = size_ - pof2;  // ranks below 2 * rem pair up first: the even one sits out
  int vrank = rank_ - rem;       // rank among the pof2 that double
  if (rank_ < 2 * rem) {
    if (rank_ % 2 == 0) {
      step(rank_ + 1, acc, -1, nullptr);
      vrank = -1;
    } else {
      step(-1, nullptr, rank_ - 1, tmp);
      combine(rank_ - 1);
      vrank = rank_ / 2;
    }
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      step(peer, acc, peer, tmp);
      combine(peer);
    }
  }
  if (rank_ < 2 * rem) {
    if (rank_ % 2 == 1)
      step(rank_ - 1, acc, -1, nullptr);
    else
      step(-1, nullptr, rank_ + 1, acc);  // it sat out: its own values are not needed any more
  }
  return acc;
}

void InlineCollectives::all_reduce(const void* send, void* recv, size_t count, DType type,
                                   ReduceOp op, const Deadline& deadline) {
  if (!abandoned_.empty()) abandoned_pending();
  TraceSpan span("mpi all_reduce", "collective", -1,
                 static_cast<int64_t>(count * dtype_size(type)));
  auto what = [&] { return describe("all_reduce", count, type, reduce_op_name(op)); };
  const int n = static_cast<int>(count);  // count * element size <= kInlineMaxBytes
  Started& s = start();
  if (type == DType::bf16 || type == DType::f16) {
    // Reduce as numbers: widen to float32, reduce, narrow once (as the progress thread does).
    s.wide.resize(count);
    half_to_float(type, static_cast<const uint16_t*>(send), s.wide.data(), count);
    auto* sum = static_cast<float*>(
        recursive_doubling(s, s.wide.data(), n, MPI_FLOAT, mpi_op(op), deadline, what));
    if (op == ReduceOp::mean) divide<float>(sum, count, size_);
    float_to_half(type, sum, static_cast<uint16_t*>(recv), count);
    return;
  }
  // Through a copy of its own, as the broadcast below: MPI may still write a collective given up
  // on, when a late peer joins, after the caller's buffer is gone.
  const size_t bytes = count * dtype_size(type);
  s.values.resize(bytes);
  if (bytes > 0) std::memcpy(s.values.data(), send, bytes);
  const void* sum =
      recursive_doubling(s, s.values.data(), n, mpi_type(type), mpi_op(op), deadline, what);
  if (bytes > 0) std::memcpy(recv, sum, bytes);
  if (op == ReduceOp::mean) sum_to_mean(recv, count, type, size_);
}

void InlineCollectives::broadcast(void* buf, size_t count, DType type, int root,
                                  const Deadline& deadline) {
  if (!abandoned_.empty()) abandoned_pending();
  TraceSpan span("mpi broadcast", "collective", -1, static_cast<int64_t>(count * dtype_size(type)));
  auto what = [&] {
    return describe("broadcast", count, type, ("root " + std::to_string(root)).c_str());
  };
  // Through a buffer of its own: a broadcast given up on stays started, and when a late peer
  // joins it MPI still reads (root) or writes (the others) it, after the caller's buffer is gone.
  const size_t bytes = count * dtype_size(type);
  Started& s = start();
  s.scratch.resize(bytes);
  if (rank_ == root && bytes > 0) std::memcpy(s.scratch.data(), buf, bytes);
  LS_CHECK_MPI(MPI_Ibcast(s.scratch.data(), static_cast<int>(count), mpi_type(type), root, comm_,
                          &s.requests[0]));
  finish(s, deadline, what);
  if (rank_ != root && bytes > 0) std::memcpy(buf, s.scratch.data(), bytes);
}

void InlineCollectives::barrier(const Deadline& deadline) {
  if (!abandoned_.empty()) abandoned_pending();
  Started& s = start();
  LS_CHECK_MPI(MPI_Ibarrier(comm_, &s.requests[0]));
  finish(s, deadline, [] { return std::string("barrier"); });
}

}  // namespace lockstep::mpi_detail
