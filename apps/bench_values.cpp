#include "apps/bench_values.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lockstep::bench {

namespace {

// Values run 1..modulus; modulus * ranks <= 255 keeps every sum exact in uint8 and bfloat16.
size_t modulus(int ranks) {
  return static_cast<size_t>(std::clamp(255 / std::max(ranks, 1), 1, 13));
}

template <class T>
void store_as(void* buf, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(buf) + i * sizeof(T), &v, sizeof(T));
}

template <class T>
T load_as(const void* buf, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

double input_value(int rank, size_t i, int ranks) {
  return static_cast<double>(1 + (i + 3 * static_cast<size_t>(rank)) % modulus(ranks));
}

double reduced_value(ReduceOp op, DType type, size_t i, int ranks) {
  double sum = 0;
  double hi = input_value(0, i, ranks);
  double lo = hi;
  for (int r = 0; r < ranks; ++r) {
    double v = input_value(r, i, ranks);
    sum += v;
    hi = std::max(hi, v);
    lo = std::min(lo, v);
  }
  if (type == DType::u8) sum = std::fmod(sum, 256.0);
  switch (op) {
    case ReduceOp::sum: return sum;
    case ReduceOp::mean: return dtype_is_float(type) ? sum / ranks : std::trunc(sum / ranks);
    case ReduceOp::max: return hi;
    case ReduceOp::min: return lo;
  }
  return 0;
}

void store_value(DType type, void* buf, size_t i, double value) {
  switch (type) {
    case DType::f32: store_as<float>(buf, i, static_cast<float>(value)); break;
    case DType::f64: store_as<double>(buf, i, value); break;
    case DType::bf16: store_as<uint16_t>(buf, i, float_to_bf16(static_cast<float>(value))); break;
    case DType::f16: store_as<uint16_t>(buf, i, float_to_f16(static_cast<float>(value))); break;
    case DType::i32: store_as<int32_t>(buf, i, static_cast<int32_t>(value)); break;
    case DType::i64: store_as<int64_t>(buf, i, static_cast<int64_t>(value)); break;
    case DType::u8: store_as<uint8_t>(buf, i, static_cast<uint8_t>(value)); break;
  }
}

double load_value(DType type, const void* buf, size_t i) {
  switch (type) {
    case DType::f32: return load_as<float>(buf, i);
    case DType::f64: return load_as<double>(buf, i);
    case DType::bf16: return bf16_to_float(load_as<uint16_t>(buf, i));
    case DType::f16: return f16_to_float(load_as<uint16_t>(buf, i));
    case DType::i32: return load_as<int32_t>(buf, i);
    case DType::i64: return static_cast<double>(load_as<int64_t>(buf, i));
    case DType::u8: return load_as<uint8_t>(buf, i);
  }
  return std::nan("");
}

bool values_match(DType type, double got, double want) {
  double tolerance = 0;
  switch (type) {
    case DType::f32: tolerance = 1e-6; break;
    case DType::f64: tolerance = 1e-12; break;
    case DType::bf16: tolerance = 1.0 / 128; break;
    case DType::f16: tolerance = 1.0 / 1024; break;
    default: return got == want;
  }
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

}  // namespace lockstep::bench
