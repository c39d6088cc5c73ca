// RecordingCommunicator: a Communicator that forwards every call to another and keeps a running
// hash of the sequence of collectives issued through it - which call, its count, element type,
// root and reduce op, not the data - so that ranks can check that they issued the same
// collectives in the same order. A branch that only some ranks take (a verdict not agreed, a
// rank-dependent early exit) shows as sequences that differ, at the check rather than as a hang
// or a timeout somewhere later. The guard that tests wrap around a trainer's communicators
// (trainer_mpi_test), and a debugging aid for a program's own collectives.
// Not thread-safe, as the communicator it wraps; verify() is collective over its checker.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/communicator.h"

namespace lockstep {

class RecordingCommunicator : public Communicator {
 public:
  // Records the calls made through this object, forwards them to `inner`, which must outlive it.
  // Takes inner's timeout; set_timeout() here sets the deadline of the calls forwarded from here.
  explicit RecordingCommunicator(Communicator& inner);

  // The number of collectives recorded, and the hash of their sequence.
  int64_t calls() const { return calls_; }
  uint64_t sequence_hash() const { return hash_; }

  // Collective over `checker` (host buffers, the same ranks; its calls are not recorded): throws
  // Error naming the first rank whose sequence differs from rank 0's, with both call counts;
  // `when` goes into the message ("at the end").
  void verify(Communicator& checker, const std::string& when) const;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Backend backend() const override { return inner_.backend(); }
  bool device_buffers() const override { return inner_.device_buffers(); }
  WorkHandle all_reduce_async(const void* send, void* recv, size_t count, DType type,
                              ReduceOp op) override;
  WorkHandle broadcast_async(void* buf, size_t count, DType type, int root) override;
  WorkHandle all_gather_async(const void* send, void* recv, size_t count, DType type) override;
  WorkHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType type,
                                  ReduceOp op) override;
  WorkHandle barrier_async() override;
  void all_reduce(const void* send, void* recv, size_t count, DType type, ReduceOp op) override;
  void broadcast(void* buf, size_t count, DType type, int root) override;
  void all_gather(const void* send, void* recv, size_t count, DType type) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType type, ReduceOp op) override;
  void barrier() override;
  void set_compute_stream(void* stream) override { inner_.set_compute_stream(stream); }
  bool capturable() const override { return inner_.capturable(); }
  void join_stream(void* stream) override { inner_.join_stream(stream); }
  WorkHandle watch_stream(void* stream, const std::string& what) override {
    return inner_.watch_stream(stream, what);
  }
  std::string lost() const override { return inner_.lost(); }
  bool quiet() override { return inner_.quiet(); }

 private:
  enum class Call : uint8_t { all_reduce = 1, broadcast, all_gather, reduce_scatter, barrier };
  // Adds one call to the sequence and hands `inner` this object's deadline.
  Communicator& record(Call call, size_t count, DType type, int root, ReduceOp op);

  Communicator& inner_;
  uint64_t hash_ = 0;
  int64_t calls_ = 0;
};

}  // namespace lockstep
