// What the MPI backend's two ways of running a collective share (comm_mpi.cpp: the progress
// thread; mpi_inline.cpp: small blocking collectives on the calling thread): the MPI names of
// Lockstep's types and reduce ops, the sum-to-mean step, and the text of a missed deadline, so
// both ways fail with the same message. Internal to runtime/comm/.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "runtime/base/communicator.h"
#include "runtime/base/error.h"

namespace lockstep::mpi_detail {

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // moved as raw words; reduced through float32
  }
  return MPI_DATATYPE_NULL;
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

template <class T>
void divide(void* buf, size_t n, int by) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(by));
}

// After a sum, turns it into a mean in place (the float32 staging buffer for 16-bit types).
inline void sum_to_mean(void* buf, size_t n, DType t, int size) {
  switch (t) {
    case DType::f32: divide<float>(buf, n, size); break;
    case DType::f64: divide<double>(buf, n, size); break;
    case DType::i32: divide<int32_t>(buf, n, size); break;
    case DType::i64: divide<int64_t>(buf, n, size); break;
    case DType::u8: divide<uint8_t>(buf, n, size); break;
    case DType::bf16:
    case DType::f16: break;  // handled on the float32 staging buffer
  }
}

// "all_reduce (2 x float32, sum)": how errors name a collective.
inline std::string describe(const char* name, size_t count, DType type, const char* extra) {
  std::ostringstream os;
  os << name << " (" << count << " x " << dtype_name(type);
  if (extra != nullptr) os << ", " << extra;
  os << ")";
  return os.str();
}

// The TimeoutError of a wait that gave up on `what` after `timeout`.
inline TimeoutError missed_deadline(const std::string& what, Millis timeout) {
  std::ostringstream os;
  os << rank_prefix() << " " << what << " did not complete within "
     << std::chrono::duration<double>(timeout).count()
     << " s: a peer rank has died, stalled, or skipped this collective";
  return TimeoutError(os.str());
}

}  // namespace lockstep::mpi_detail
