// Stands in for comm_nccl.cu when CUDA/NCCL is not built.
#include "runtime/base/communicator.h"
#include "runtime/base/error.h"
#include "runtime/comm/nccl_bootstrap.h"

namespace lockstep {

bool nccl_available() { return false; }
size_t nccl_completion_events_created() { return 0; }

std::unique_ptr<Communicator> make_nccl_communicator(int, Millis) {
  throw UsageError(
      "the NCCL backend is not built into this binary (configure with "
      "LOCKSTEP_CUDA=ON where nvcc and NCCL are installed), use --comm mpi");
}

std::unique_ptr<Communicator> make_nccl_communicator(int device, Millis timeout, Communicator&) {
  return make_nccl_communicator(device, timeout);
}

}  // namespace lockstep
