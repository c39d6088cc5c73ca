#include "runtime/base/dtype.h"

#include <cmath>
#include <cstring>

namespace lockstep {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a quiet NaN
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// GCC 12 on x86-64 has _Float16 with correctly rounded conversions.
uint16_t float_to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

float f16_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

void half_to_float(DType t, const uint16_t* in, float* out, size_t n) {
  if (t == DType::bf16)
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = f16_to_float(in[i]);
}

void float_to_half(DType t, const float* in, uint16_t* out, size_t n) {
  if (t == DType::bf16)
    for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = float_to_f16(in[i]);
}

}  // namespace lockstep
