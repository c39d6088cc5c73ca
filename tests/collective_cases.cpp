#include "collective_cases.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace lockstep::testing_util {

BufferOps host_buffer_ops() {
  BufferOps ops;
  ops.alloc = [](size_t bytes) -> void* { return ::operator new(std::max<size_t>(bytes, 1)); };
  ops.release = [](void* p) { ::operator delete(p); };
  ops.upload = [](void* dst, const void* src, size_t n) { if (n) std::memcpy(dst, src, n); };
  ops.download = [](void* dst, const void* src, size_t n) { if (n) std::memcpy(dst, src, n); };
  return ops;
}

std::vector<unsigned char> encode(DType type, const std::vector<double>& values) {
  std::vector<unsigned char> out(values.size() * dtype_size(type));
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    unsigned char* p = out.data() + i * dtype_size(type);
    switch (type) {
      case DType::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::f64: std::memcpy(p, &v, 8); break;
      case DType::bf16: { uint16_t h = float_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::f16: { uint16_t h = float_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::i32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
      case DType::i64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
      case DType::u8: { uint8_t x = static_cast<uint8_t>(v); *p = x; break; }
    }
  }
  return out;
}

std::vector<double> decode(DType type, const unsigned char* bytes, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* p = bytes + i * dtype_size(type);
    switch (type) {
      case DType::f32: { float f; std::memcpy(&f, p, 4); out[i] = f; break; }
      case DType::f64: std::memcpy(&out[i], p, 8); break;
      case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = bf16_to_float(h); break; }
      case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); out[i] = f16_to_float(h); break; }
      case DType::i32: { int32_t x; std::memcpy(&x, p, 4); out[i] = x; break; }
      case DType::i64: { int64_t x; std::memcpy(&x, p, 8); out[i] = static_cast<double>(x); break; }
      case DType::u8: out[i] = *p; break;
    }
  }
  return out;
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

std::vector<size_t> test_sizes(DType type, bool include_large) {
  std::vector<size_t> s = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
  if (include_large) s.push_back((size_t{64} << 20) / dtype_size(type));
  return s;
}

namespace {

double expected_reduce(ReduceOp op, DType type, size_t i, int size) {
  double sum = 0, mx = -1e300, mn = 1e300;
  for (int r = 0; r < size; ++r) {
    double v = test_value(r, i);
    sum += v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case ReduceOp::sum: return sum;
    case ReduceOp::mean: return dtype_is_float(type) ? sum / size : std::trunc(sum / size);
    case ReduceOp::max: return mx;
    case ReduceOp::min: return mn;
  }
  return 0;
}

size_t count_wrong(DType type, const std::vector<double>& got,
                   const std::function<double(size_t)>& want) {
  size_t wrong = 0;
  double tol = tolerance(type);
  for (size_t i = 0; i < got.size(); ++i) {
    double w = want(i);
    if (std::fabs(got[i] - w) > tol * std::max(1.0, std::fabs(w))) ++wrong;
  }
  return wrong;
}

struct DeviceBuffer {
  const BufferOps& ops;
  void* ptr;
  DeviceBuffer(const BufferOps& o, size_t bytes) : ops(o), ptr(o.alloc(bytes)) {}
  ~DeviceBuffer() { ops.release(ptr); }
};

std::vector<double> rank_values(int rank, size_t n, size_t offset = 0) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = test_value(rank, i + offset);
  return v;
}

std::vector<double> fetch(const BufferOps& ops, DType type, const void* dev, size_t n) {
  std::vector<unsigned char> host(n * dtype_size(type));
  ops.download(host.data(), dev, host.size());
  return decode(type, host.data(), n);
}

}  // namespace

size_t check_all_reduce(Communicator& comm, const BufferOps& ops, DType type, ReduceOp op,
                        size_t count, bool in_place) {
  const size_t bytes = count * dtype_size(type);
  auto input = encode(type, rank_values(comm.rank(), count));
  DeviceBuffer send(ops, bytes), recv(ops, bytes);
  ops.upload(in_place ? recv.ptr : send.ptr, input.data(), bytes);
  comm.all_reduce(in_place ? recv.ptr : send.ptr, recv.ptr, count, type, op);
  auto got = fetch(ops, type, recv.ptr, count);
  return count_wrong(type, got, [&](size_t i) { return expected_reduce(op, type, i, comm.size()); });
}

size_t check_broadcast(Communicator& comm, const BufferOps& ops, DType type, size_t count, int root) {
  const size_t bytes = count * dtype_size(type);
  // Non-roots start with their own values, so a missing broadcast shows.
  auto input = encode(type, rank_values(comm.rank(), count));
  DeviceBuffer buf(ops, bytes);
  ops.upload(buf.ptr, input.data(), bytes);
  comm.broadcast(buf.ptr, count, type, root);
  auto got = fetch(ops, type, buf.ptr, count);
  return count_wrong(type, got, [&](size_t i) { return test_value(root, i); });
}

size_t check_all_gather(Communicator& comm, const BufferOps& ops, DType type, size_t count) {
  const size_t es = dtype_size(type);
  const size_t total = count * comm.size();
  auto input = encode(type, rank_values(comm.rank(), count, comm.rank() * count));
  DeviceBuffer send(ops, count * es), recv(ops, total * es);
  ops.upload(send.ptr, input.data(), count * es);
  comm.all_gather(send.ptr, recv.ptr, count, type);
  auto got = fetch(ops, type, recv.ptr, total);
  return count_wrong(type, got, [&](size_t i) { return test_value(static_cast<int>(i / std::max<size_t>(count, 1)), i); });
}

size_t check_reduce_scatter(Communicator& comm, const BufferOps& ops, DType type, ReduceOp op,
                            size_t count) {
  const size_t es = dtype_size(type);
  const size_t total = count * comm.size();
  auto input = encode(type, rank_values(comm.rank(), total));
  DeviceBuffer send(ops, total * es), recv(ops, count * es);
  ops.upload(send.ptr, input.data(), total * es);
  comm.reduce_scatter(send.ptr, recv.ptr, count, type, op);
  auto got = fetch(ops, type, recv.ptr, count);
  size_t offset = comm.rank() * count;
  return count_wrong(type, got,
                     [&](size_t i) { return expected_reduce(op, type, offset + i, comm.size()); });
}

void run_all_collective_cases(Communicator& comm, const BufferOps& ops, bool include_large) {
  for (DType type : all_dtypes()) {
    for (size_t count : test_sizes(type, include_large)) {
      bool large = count * dtype_size(type) >= (size_t{64} << 20);
      // The 64 MiB case is the full buffer for all_gather/reduce_scatter, split across ranks.
      size_t block = large ? count / comm.size() : count;
      std::string where = std::string(dtype_name(type)) + " x " + std::to_string(count);
      for (ReduceOp op : all_ops()) {
        EXPECT_EQ(0u, check_all_reduce(comm, ops, type, op, count, false))
            << "all_reduce " << reduce_op_name(op) << " " << where;
        if (!large)
          EXPECT_EQ(0u, check_all_reduce(comm, ops, type, op, count, true))
              << "in-place all_reduce " << reduce_op_name(op) << " " << where;
        EXPECT_EQ(0u, check_reduce_scatter(comm, ops, type, op, block))
            << "reduce_scatter " << reduce_op_name(op) << " " << where;
      }
      for (int root = 0; root < comm.size(); ++root) {
        if (large && root > 0) break;
        EXPECT_EQ(0u, check_broadcast(comm, ops, type, count, root))
            << "broadcast root " << root << " " << where;
      }
      EXPECT_EQ(0u, check_all_gather(comm, ops, type, block)) << "all_gather " << where;
    }
  }
}

}  // namespace lockstep::testing_util
