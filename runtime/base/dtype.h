// Element types a communicator moves and reduces. bf16 and f16 are stored as raw 16-bit words here
// (uint16_t) and converted to and from float32 for arithmetic: reductions over them accumulate in
// float32, never on the raw bits.
// Types and pure functions: thread-safe, no collective calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

enum class DType { f32, f64, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "bfloat16", ...
bool dtype_is_float(DType t);

// Round-to-nearest-even conversions for the 16-bit float formats.
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

// Whole-buffer conversions between a 16-bit format (bf16 or f16) and float32.
void half_to_float(DType t, const uint16_t* in, float* out, size_t n);
void float_to_half(DType t, const float* in, uint16_t* out, size_t n);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

}  // namespace lockstep
