#include "runtime/comm/nccl_bootstrap.h"

#include <cstring>

#include "runtime/base/error.h"
#include "runtime/comm/agree.h"

namespace lockstep {

std::vector<unsigned char> broadcast_unique_id(Communicator& host, size_t bytes,
                                               const std::function<std::string(void* out)>& make) {
  require_host_buffers(host, "the NCCL unique id's broadcast");
  // One byte of verdict, then the id: a failure on rank 0 reaches every rank in the same message.
  std::vector<unsigned char> msg(bytes + 1, 0);
  std::string why;
  if (host.rank() == 0) {
    why = make(msg.data() + 1);
    msg[0] = why.empty() ? 1 : 0;
  }
  host.broadcast(msg.data(), msg.size(), DType::u8, 0);
  if (host.rank() == 0 && !why.empty()) throw Error(rank_prefix() + " " + why);
  if (msg[0] != 1)
    throw Error(rank_prefix() + " rank 0 could not create the NCCL unique id; see its message");
  return std::vector<unsigned char>(msg.begin() + 1, msg.end());
}

std::string nccl_timeout_reason(const std::string& what) {
  std::string reason =
      ": a peer rank has died, stalled, or never reached it; the NCCL communicator was aborted";
  if (what.rfind("nccl init", 0) == 0)
    reason +=
        "; if every rank reached it, the ranks may not reach each other over the network "
        "NCCL chose: name the interface (--iface, LOCKSTEP_IFACE or NCCL_SOCKET_IFNAME) and "
        "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET";
  return reason;
}

}  // namespace lockstep
