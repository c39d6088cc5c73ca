#include "runtime/comm/agree.h"

#include <cstdint>
#include <vector>

#include "runtime/base/error.h"

namespace lockstep {

namespace detail {
void throw_agreed(const std::string& message) { throw AgreedUsageError(message); }
}  // namespace detail

std::optional<FirstProblem> first_problem(Communicator& comm, bool ok, const std::string& message) {
  require_host_buffers(comm, "agreeing on a verdict");
  // One gather gives both the lowest failing rank and the count.
  int32_t mine = ok ? 0 : 1;
  std::vector<int32_t> failed(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, failed.data(), 1, DType::i32);
  FirstProblem p;
  for (int r = 0; r < comm.size(); ++r) {
    if (failed[static_cast<size_t>(r)] == 0) continue;
    if (p.rank < 0) p.rank = r;
    ++p.ranks;
  }
  if (p.rank < 0) return std::nullopt;
  int64_t len = comm.rank() == p.rank ? static_cast<int64_t>(message.size()) : 0;
  comm.broadcast(&len, 1, DType::i64, p.rank);
  p.message.assign(static_cast<size_t>(len), '\0');
  if (comm.rank() == p.rank) p.message = message;
  comm.broadcast(p.message.data(), p.message.size(), DType::u8, p.rank);
  return p;
}

void agree_or_throw(Communicator& comm, bool ok, const std::string& message) {
  if (auto p = first_problem(comm, ok, message)) detail::throw_agreed(p->message);
}

void require_host_buffers(const Communicator& comm, const std::string& who) {
  if (!comm.device_buffers()) return;
  throw UsageError(who +
                   " exchanges small host-side values (loss sums, flags, checksums), but the " +
                   backend_name(comm.backend()) +
                   " communicator it was given takes device buffers only; give it a communicator "
                   "over host memory (make_mpi_communicator() without device_buffers)");
}

}  // namespace lockstep
