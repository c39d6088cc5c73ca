// Collective test cases written once and instantiated per backend and memory kind (host buffers
// here; device buffers in the GPU tests). Values depend on rank and index so that a wrong root,
// order or op shows; integers must match exactly, floats within the type's tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/dtype.h"

namespace lockstep::testing_util {

// Where the buffers under test live. Host: plain memory. Device: allocate/copy through CUDA.
struct BufferOps {
  std::function<void*(size_t bytes)> alloc;
  std::function<void(void*)> release;
  std::function<void(void* dst, const void* host_src, size_t bytes)> upload;
  std::function<void(void* host_dst, const void* src, size_t bytes)> download;
};

BufferOps host_buffer_ops();

// Small integers, exact in every type (bf16 holds integers up to 256 exactly; sums stay below).
inline double test_value(int rank, size_t i) { return static_cast<double>(i % 13 + 3 * rank + 1); }

// Encodes doubles into a buffer of `type`, and back.
std::vector<unsigned char> encode(DType type, const std::vector<double>& values);
std::vector<double> decode(DType type, const unsigned char* bytes, size_t n);
double tolerance(DType type);  // relative

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};
  return v;
}
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> v = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max,
                                          ReduceOp::min};
  return v;
}

// Sizes in elements for `type`: 0, 1, 7, 1000, 2^20+3 and 64 MiB worth of elements.
std::vector<size_t> test_sizes(DType type, bool include_large);

// Each returns the number of wrong elements on this rank (0 expected).
size_t check_all_reduce(Communicator& comm, const BufferOps& ops, DType type, ReduceOp op,
                        size_t count, bool in_place);
size_t check_broadcast(Communicator& comm, const BufferOps& ops, DType type, size_t count, int root);
size_t check_all_gather(Communicator& comm, const BufferOps& ops, DType type, size_t count);
size_t check_reduce_scatter(Communicator& comm, const BufferOps& ops, DType type, ReduceOp op,
                            size_t count);

// Runs every op x type x size on `comm` and reports failures through gtest.
void run_all_collective_cases(Communicator& comm, const BufferOps& ops, bool include_large);

}  // namespace lockstep::testing_util
