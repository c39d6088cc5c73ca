#include "collective_cases.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lockstep::testing_util {

BufferOps host_buffer_ops() {
  BufferOps ops;
  ops.alloc = [](size_t bytes) -> void* { return ::operator new(std::max<size_t>(bytes, 1)); };
  ops.release = [](void* p) { ::operator delete(p); };
  ops.upload = [](void* dst, const void* src, size_t n) {
    if (n) std::memcpy(dst, src, n);
  };
  ops.download = [](void* dst, const void* src, size_t n) {
    if (n) std::memcpy(dst, src, n);
  };
  return ops;
}

double tolerance(DType type) {
  switch (type) {
    case DType::bf16: return 1.0 / 128;
    case DType::f16: return 1.0 / 1024;
    case DType::f32: return 1e-6;
    case DType::f64: return 1e-12;
    default: return 0.0;
  }
}

const std::vector<size_t>& type_matrix_sizes() {
  static const std::vector<size_t> v = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
  return v;
}

CaseBuffers::~CaseBuffers() {
  if (send_ != nullptr) ops_.release(send_);
  if (recv_ != nullptr) ops_.release(recv_);
}

void* CaseBuffers::grow(void*& ptr, size_t& have, size_t bytes) {
  if (ptr != nullptr && bytes <= have) return ptr;
  if (ptr != nullptr) ops_.release(ptr);
  ptr = nullptr;  // alloc may throw; the destructor must not free twice
  ptr = ops_.alloc(std::max<size_t>(bytes, 1));
  have = bytes;
  return ptr;
}

void store_value(DType type, unsigned char* p, double v) {
  switch (type) {
    case DType::f32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::bf16: {
      uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::f16: {
      uint16_t h = float_to_f16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::i32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::i64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::u8: *p = static_cast<uint8_t>(v); break;
  }
}

namespace {

double load(DType type, const unsigned char* p) {
  switch (type) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::f64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_float(h);
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_float(h);
    }
    case DType::i32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DType::i64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case DType::u8: return *p;
  }
  return 0;
}

// Never null, even for the empty cases (memset and memcpy take no null pointer, even for 0 bytes).
unsigned char* staging(CaseBuffers& buf, size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (buf.host().size() < bytes) buf.host().resize(bytes);
  return buf.host().data();
}

// Uploads test_value(rank, offset + i), i < n, encoded as `type`, to `dst`.
void upload_values(CaseBuffers& buf, void* dst, DType type, int rank, size_t n, size_t offset) {
  const size_t es = dtype_size(type);
  unsigned char* host = staging(buf, n * es);
  for (size_t i = 0; i < n; ++i) store_value(type, host + i * es, test_value(rank, offset + i));
  buf.ops().upload(dst, host, n * es);
}

// All bits set: NaN in every float type, -1 or 255 in the integer ones; never an expected value.
void poison(CaseBuffers& buf, void* dst, size_t bytes) {
  unsigned char* host = staging(buf, bytes);
  std::memset(host, 0xFF, bytes);
  buf.ops().upload(dst, host, bytes);
}

// Downloads n elements of `type` from `src` and counts those that differ from want(i) by more
// than the type's tolerance (a NaN always differs).
template <class Want>
size_t count_wrong(CaseBuffers& buf, const void* src, DType type, size_t n, const Want& want) {
  const size_t es = dtype_size(type);
  unsigned char* host = staging(buf, n * es);
  buf.ops().download(host, src, n * es);
  const double tol = tolerance(type);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    double w = want(i);
    if (!(std::fabs(load(type, host + i * es) - w) <= tol * std::max(1.0, std::fabs(w)))) ++wrong;
  }
  return wrong;
}

// The reduction over ranks of test_value(r, i), which depends on i only through i % 13.
class ReducedValues {
 public:
  ReducedValues(ReduceOp op, DType type, int size) {
    for (size_t i = 0; i < v_.size(); ++i) {
      double sum = 0, mx = -1e300, mn = 1e300;
      for (int r = 0; r < size; ++r) {
        double x = test_value(r, i);
        sum += x;
        mx = std::max(mx, x);
        mn = std::min(mn, x);
      }
      switch (op) {
        case ReduceOp::sum: v_[i] = sum; break;
        case ReduceOp::mean:
          v_[i] = dtype_is_float(type) ? sum / size : std::trunc(sum / size);
          break;
        case ReduceOp::max: v_[i] = mx; break;
        case ReduceOp::min: v_[i] = mn; break;
      }
    }
  }
  double operator()(size_t i) const { return v_[i % v_.size()]; }

 private:
  std::array<double, 13> v_{};
};

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::broadcast: return "broadcast";
    case Collective::all_gather: return "all_gather";
  }
  return "?";
}

bool has_reduce_op(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce_scatter;
}

}  // namespace

size_t check_all_reduce(Communicator& comm, CaseBuffers& buf, DType type, ReduceOp op, size_t count,
                        bool in_place) {
  const size_t bytes = count * dtype_size(type);
  void* recv = buf.recv(bytes);
  void* send = in_place ? recv : buf.send(bytes);
  upload_values(buf, send, type, comm.rank(), count, 0);
  if (!in_place) poison(buf, recv, bytes);
  comm.all_reduce(send, recv, count, type, op);
  return count_wrong(buf, recv, type, count, ReducedValues(op, type, comm.size()));
}

size_t check_broadcast(Communicator& comm, CaseBuffers& buf, DType type, size_t count, int root) {
  // Non-roots start with their own values, so a missing broadcast shows.
  void* data = buf.recv(count * dtype_size(type));
  upload_values(buf, data, type, comm.rank(), count, 0);
  comm.broadcast(data, count, type, root);
  return count_wrong(buf, data, type, count, [&](size_t i) { return test_value(root, i); });
}

size_t check_all_gather(Communicator& comm, CaseBuffers& buf, DType type, size_t count) {
  const size_t es = dtype_size(type);
  const size_t total = count * comm.size();
  void* send = buf.send(count * es);
  void* recv = buf.recv(total * es);
  upload_values(buf, send, type, comm.rank(), count, comm.rank() * count);
  poison(buf, recv, total * es);
  comm.all_gather(send, recv, count, type);
  const size_t block = std::max<size_t>(count, 1);
  return count_wrong(buf, recv, type, total,
                     [&](size_t i) { return test_value(static_cast<int>(i / block), i); });
}

size_t check_reduce_scatter(Communicator& comm, CaseBuffers& buf, DType type, ReduceOp op,
                            size_t count) {
  const size_t es = dtype_size(type);
  const size_t total = count * comm.size();
  void* send = buf.send(total * es);
  void* recv = buf.recv(count * es);
  upload_values(buf, send, type, comm.rank(), total, 0);
  poison(buf, recv, count * es);
  comm.reduce_scatter(send, recv, count, type, op);
  const size_t offset = comm.rank() * count;
  ReducedValues reduced(op, type, comm.size());
  return count_wrong(buf, recv, type, count, [&](size_t i) { return reduced(offset + i); });
}

void run_type_matrix(Communicator& comm, CaseBuffers& buf, DType type) {
  for (size_t count : type_matrix_sizes()) {
    std::string where = std::string(dtype_name(type)) + " x " + std::to_string(count);
    for (ReduceOp op : all_ops()) {
      EXPECT_EQ(0u, check_all_reduce(comm, buf, type, op, count, false))
          << "all_reduce " << reduce_op_name(op) << " " << where;
      EXPECT_EQ(0u, check_all_reduce(comm, buf, type, op, count, true))
          << "in-place all_reduce " << reduce_op_name(op) << " " << where;
      EXPECT_EQ(0u, check_reduce_scatter(comm, buf, type, op, count))
          << "reduce_scatter " << reduce_op_name(op) << " " << where;
    }
    for (int root = 0; root < comm.size(); ++root)
      EXPECT_EQ(0u, check_broadcast(comm, buf, type, count, root))
          << "broadcast root " << root << " " << where;
    EXPECT_EQ(0u, check_all_gather(comm, buf, type, count)) << "all_gather " << where;
  }
}

const std::vector<LargeCase>& large_cases() {
  // Each collective and reduce op once; the types rotate so that each runs at 64 MiB somewhere,
  // the 16-bit ones (reduced through a float32 copy) more than once.
  static const std::vector<LargeCase> v = {
      {Collective::all_reduce, ReduceOp::sum, DType::f32},
      {Collective::all_reduce, ReduceOp::mean, DType::bf16},
      {Collective::all_reduce, ReduceOp::max, DType::i64},
      {Collective::all_reduce, ReduceOp::min, DType::u8},
      {Collective::reduce_scatter, ReduceOp::sum, DType::f16},
      {Collective::reduce_scatter, ReduceOp::mean, DType::i32},
      {Collective::reduce_scatter, ReduceOp::max, DType::f64},
      {Collective::reduce_scatter, ReduceOp::min, DType::bf16},
      {Collective::broadcast, ReduceOp::sum, DType::i32},
      {Collective::all_gather, ReduceOp::sum, DType::f16},
  };
  return v;
}

void run_large_case(Communicator& comm, CaseBuffers& buf, const LargeCase& c) {
  const size_t count = kLargeBytes / dtype_size(c.type);
  const size_t block = count / comm.size();
  const int root = comm.size() - 1;
  std::string what = std::string(collective_name(c.collective)) + " " +
                     (has_reduce_op(c.collective) ? std::string(reduce_op_name(c.op)) + " " : "") +
                     dtype_name(c.type) + " x " + std::to_string(count);
  switch (c.collective) {
    case Collective::all_reduce:
      EXPECT_EQ(0u, check_all_reduce(comm, buf, c.type, c.op, count, false)) << what;
      break;
    case Collective::reduce_scatter:
      EXPECT_EQ(0u, check_reduce_scatter(comm, buf, c.type, c.op, block)) << what;
      break;
    case Collective::broadcast:
      EXPECT_EQ(0u, check_broadcast(comm, buf, c.type, count, root)) << what << " root " << root;
      break;
    case Collective::all_gather:
      EXPECT_EQ(0u, check_all_gather(comm, buf, c.type, block)) << what;
      break;
  }
}

std::string dtype_case_name(const ::testing::TestParamInfo<DType>& info) {
  return dtype_name(info.param);
}

std::string large_case_name(const ::testing::TestParamInfo<LargeCase>& info) {
  const LargeCase& c = info.param;
  std::string name = collective_name(c.collective);
  if (has_reduce_op(c.collective)) name += std::string("_") + reduce_op_name(c.op);
  return name + "_" + dtype_name(c.type);
}

Communicator& SharedCases::comm() {
  if (!comm_) comm_ = make_comm_();
  return *comm_;
}

CaseBuffers& SharedCases::buffers() {
  if (!buffers_) buffers_ = std::make_unique<CaseBuffers>(make_ops_());
  return *buffers_;
}

void SharedCases::release() {
  buffers_.reset();
  comm_.reset();
}

}  // namespace lockstep::testing_util
