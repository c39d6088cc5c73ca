// Start-up of the NCCL backend over the host communicator (DESIGN.md decision 3): rank 0 makes
// NCCL's unique id and every rank receives it by a broadcast over the world's host communicator,
// under that communicator's deadline. Everything else at start-up has a deadline; a raw MPI_Bcast
// here would leave every rank waiting for ever on a rank 0 that is slow or stuck before it (its
// first CUDA context is made just before). Plain C++ (no NCCL types), so the exchange is tested on
// CPU ranks; the NCCL build passes ncclGetUniqueId in as `make`.
// Collective over `host`; called from the thread that issues its collectives.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"

namespace lockstep {

// Rank 0 calls make(out), which writes `bytes` bytes to `out` and returns "" or why it could not;
// every rank of `host` returns those bytes, broadcast under host.timeout() (a rank that waits
// longer throws TimeoutError naming the broadcast). When make failed, rank 0 throws Error with its
// reason and every other rank an Error saying so, instead of waiting for an id that never comes.
std::vector<unsigned char> broadcast_unique_id(Communicator& host, size_t bytes,
                                               const std::function<std::string(void* out)>& make);

// Why a wait on NCCL gave up, after "<what> did not complete within <t>": a peer died, stalled or
// never came, the communicator was aborted; and where `what` is NCCL's start-up ("nccl init ..."),
// where a wrong network interface shows first, the hint to name the interface and to rerun with
// NCCL's INIT and NET debugging.
std::string nccl_timeout_reason(const std::string& what);

// How many CUDA events the NCCL communicators of this process have created for their collectives'
// completion: after the first steps a pool serves them all (0 without NCCL). For tests.
size_t nccl_completion_events_created();

// make_nccl_communicator (communicator.h) with the unique id sent over `host`, a communicator of
// host buffers over the same ranks (Context::host): its deadline bounds the exchange. The CUDA
// build's comm_nccl.cu; without it, comm_nccl_stub.cpp throws UsageError.
std::unique_ptr<Communicator> make_nccl_communicator(int device, Millis timeout,
                                                     Communicator& host);

}  // namespace lockstep
