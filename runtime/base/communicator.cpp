// The Communicator interface's own parts (communicator.h): the names of its enums and the
// defaults of its CUDA-graph calls, which every backend that is not capturable keeps.
#include "runtime/base/communicator.h"

#include <string>

#include "runtime/base/error.h"

namespace lockstep {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

const char* backend_name(Backend b) { return b == Backend::mpi ? "mpi" : "nccl"; }

void Communicator::join_stream(void*) {
  throw Error(std::string("the ") + backend_name(backend()) +
              " communicator cannot join a CUDA stream (its collectives are not captured)");
}

WorkHandle Communicator::watch_stream(void*, const std::string& what) {
  throw Error(std::string("the ") + backend_name(backend()) + " communicator cannot watch " + what +
              " (its collectives are not captured)");
}

Backend parse_backend(const std::string& text) {
  if (text == "mpi") return Backend::mpi;
  if (text == "nccl") return Backend::nccl;
  throw UsageError("unknown communicator backend '" + text + "' (use mpi or nccl)");
}

}  // namespace lockstep
