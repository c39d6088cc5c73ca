// Collective test cases written once and instantiated per backend and memory kind (host buffers
// here; device buffers in the GPU tests). Values depend on rank and index so that a wrong root,
// order or op shows; integers must match exactly, floats within the type's tolerance.
//
// Coverage: every collective x reduce op x type at the sizes of type_matrix_sizes() (0 up to
// 2^20+3 elements), and every collective x reduce op once at 64 MiB, each with another type, so
// that every type also runs at 64 MiB (large_cases()). The cases of one test binary share one
// communicator and one set of buffers (SharedCases): allocating and filling 64 MiB per case, not
// the collectives, was what made the sweep slow.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/communicator.h"
#include "runtime/base/dtype.h"

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

double tolerance(DType type);  // relative

// v as one element of `type` at p (16-bit floats rounded as the backends round them).
void store_value(DType type, unsigned char* p, double v);

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

// Sizes in elements for the type matrix: 0, 1, 7, 1000 and 2^20+3.
const std::vector<size_t>& type_matrix_sizes();
constexpr size_t kLargeBytes = size_t{64} << 20;

// A send and a receive buffer (in the memory BufferOps manages) and their host staging, grown to
// the largest case asked for and reused by every later one. Each case writes its whole input and
// poisons the output before the collective, so a result left over from an earlier case cannot
// pass for a new one.
class CaseBuffers {
 public:
  explicit CaseBuffers(BufferOps ops) : ops_(std::move(ops)) {}
  ~CaseBuffers();
  CaseBuffers(const CaseBuffers&) = delete;
  CaseBuffers& operator=(const CaseBuffers&) = delete;

  const BufferOps& ops() const { return ops_; }
  void* send(size_t bytes) { return grow(send_, send_bytes_, bytes); }
  void* recv(size_t bytes) { return grow(recv_, recv_bytes_, bytes); }
  std::vector<unsigned char>& host() { return host_; }

 private:
  void* grow(void*& ptr, size_t& have, size_t bytes);
  BufferOps ops_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  size_t send_bytes_ = 0;
  size_t recv_bytes_ = 0;
  std::vector<unsigned char> host_;
};

// Each returns the number of wrong elements on this rank (0 expected).
size_t check_all_reduce(Communicator& comm, CaseBuffers& buf, DType type, ReduceOp op, size_t count,
                        bool in_place);
size_t check_broadcast(Communicator& comm, CaseBuffers& buf, DType type, size_t count, int root);
size_t check_all_gather(Communicator& comm, CaseBuffers& buf, DType type, size_t count);
size_t check_reduce_scatter(Communicator& comm, CaseBuffers& buf, DType type, ReduceOp op,
                            size_t count);

// Every collective, reduce op and root on `type` at each of type_matrix_sizes(); failures go to
// gtest.
void run_type_matrix(Communicator& comm, CaseBuffers& buf, DType type);

// One collective at 64 MiB. all_gather and reduce_scatter move 64 MiB in all (a block per rank);
// broadcast comes from the last rank.
enum class Collective { all_reduce, reduce_scatter, broadcast, all_gather };
struct LargeCase {
  Collective collective;
  ReduceOp op;  // all_reduce and reduce_scatter only
  DType type;
};
const std::vector<LargeCase>& large_cases();
void run_large_case(Communicator& comm, CaseBuffers& buf, const LargeCase& c);

// Names for INSTANTIATE_TEST_SUITE_P: "f32", "all_reduce_sum_f32".
std::string dtype_case_name(const ::testing::TestParamInfo<DType>& info);
std::string large_case_name(const ::testing::TestParamInfo<LargeCase>& info);

// The communicator and buffers every case of a test binary shares, made by the first case that
// asks (after its fixture's skip check). release() must run before MPI finalizes: call it from
// each suite's TearDownTestSuite (a later suite makes them again).
class SharedCases {
 public:
  using MakeComm = std::function<std::unique_ptr<Communicator>()>;
  SharedCases(MakeComm make_comm, std::function<BufferOps()> make_ops)
      : make_comm_(std::move(make_comm)), make_ops_(std::move(make_ops)) {}
  Communicator& comm();
  CaseBuffers& buffers();
  void release();

 private:
  MakeComm make_comm_;
  std::function<BufferOps()> make_ops_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<CaseBuffers> buffers_;
};

}  // namespace lockstep::testing_util
