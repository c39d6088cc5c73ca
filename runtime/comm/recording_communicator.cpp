#include "runtime/comm/recording_communicator.h"

#include <vector>

#include "runtime/base/error.h"
#include "runtime/comm/replica_check.h"

namespace lockstep {

RecordingCommunicator::RecordingCommunicator(Communicator& inner) : inner_(inner) {
  set_timeout(inner.timeout());
}

Communicator& RecordingCommunicator::record(Call call, size_t count, DType type, int root,
                                            ReduceOp op) {
  // The previous hash chained with this call's fields: the order of the calls counts.
  const uint64_t fields[5] = {
      hash_, static_cast<uint64_t>(call), static_cast<uint64_t>(count), static_cast<uint64_t>(type),
      (static_cast<uint64_t>(static_cast<uint32_t>(root)) << 8) | static_cast<uint64_t>(op)};
  hash_ = checksum64(fields, sizeof fields);
  calls_ += 1;
  inner_.set_timeout(timeout());
  return inner_;
}

WorkHandle RecordingCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                                   DType type, ReduceOp op) {
  return record(Call::all_reduce, count, type, 0, op).all_reduce_async(send, recv, count, type, op);
}
WorkHandle RecordingCommunicator::broadcast_async(void* buf, size_t count, DType type, int root) {
  return record(Call::broadcast, count, type, root, ReduceOp::sum)
      .broadcast_async(buf, count, type, root);
}
WorkHandle RecordingCommunicator::all_gather_async(const void* send, void* recv, size_t count,
                                                   DType type) {
  return record(Call::all_gather, count, type, 0, ReduceOp::sum)
      .all_gather_async(send, recv, count, type);
}
WorkHandle RecordingCommunicator::reduce_scatter_async(const void* send, void* recv, size_t count,
                                                       DType type, ReduceOp op) {
  return record(Call::reduce_scatter, count, type, 0, op)
      .reduce_scatter_async(send, recv, count, type, op);
}
WorkHandle RecordingCommunicator::barrier_async() {
  return record(Call::barrier, 0, DType::u8, 0, ReduceOp::sum).barrier_async();
}

// The blocking forms go to the inner communicator's own blocking forms (the MPI backend's small
// collectives run on the calling thread there), recorded alike.
void RecordingCommunicator::all_reduce(const void* send, void* recv, size_t count, DType type,
                                       ReduceOp op) {
  record(Call::all_reduce, count, type, 0, op).all_reduce(send, recv, count, type, op);
}
void RecordingCommunicator::broadcast(void* buf, size_t count, DType type, int root) {
  record(Call::broadcast, count, type, root, ReduceOp::sum).broadcast(buf, count, type, root);
}
void RecordingCommunicator::all_gather(const void* send, void* recv, size_t count, DType type) {
  record(Call::all_gather, count, type, 0, ReduceOp::sum).all_gather(send, recv, count, type);
}
void RecordingCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType type,
                                           ReduceOp op) {
  record(Call::reduce_scatter, count, type, 0, op).reduce_scatter(send, recv, count, type, op);
}
void RecordingCommunicator::barrier() {
  record(Call::barrier, 0, DType::u8, 0, ReduceOp::sum).barrier();
}

void RecordingCommunicator::verify(Communicator& checker, const std::string& when) const {
  const int64_t mine[2] = {static_cast<int64_t>(hash_), calls_};
  std::vector<int64_t> all(2 * static_cast<size_t>(checker.size()));
  checker.all_gather(mine, all.data(), 2, DType::i64);
  for (int r = 1; r < checker.size(); ++r) {
    const int64_t* theirs = &all[2 * static_cast<size_t>(r)];
    if (theirs[0] != all[0] || theirs[1] != all[1])
      throw Error("collective sequence check failed " + when + ": rank " + std::to_string(r) +
                  " issued " + std::to_string(theirs[1]) + " collective(s), rank 0 " +
                  std::to_string(all[1]) +
                  ", and their sequences differ: a branch taken by "
                  "some ranks only");
  }
}

}  // namespace lockstep
