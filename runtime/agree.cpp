#include "runtime/agree.h"

#include <cstdint>

#include "runtime/error.h"

namespace lockstep {

void agree_or_throw(Communicator& comm, bool ok, const std::string& message) {
  require_host_buffers(comm, "agreeing on a verdict");
  int32_t first_bad = ok ? INT32_MAX : comm.rank();
  comm.all_reduce_inplace(&first_bad, 1, ReduceOp::min);
  if (first_bad == INT32_MAX) return;
  int64_t len = comm.rank() == first_bad ? static_cast<int64_t>(message.size()) : 0;
  comm.broadcast(&len, 1, DType::i64, first_bad);
  std::string text(static_cast<size_t>(len), '\0');
  if (comm.rank() == first_bad) text = message;
  comm.broadcast(text.data(), text.size(), DType::u8, first_bad);
  throw UsageError(text);
}

void require_host_buffers(const Communicator& comm, const std::string& who) {
  if (!comm.device_buffers()) return;
  throw UsageError(who + " exchanges small host-side values (loss sums, flags, checksums), but the " +
                   backend_name(comm.backend()) +
                   " communicator it was given takes device buffers only; give it a communicator "
                   "over host memory (make_mpi_communicator() without device_buffers)");
}

}  // namespace lockstep
