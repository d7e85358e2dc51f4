#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace volt {

/// Element types. f16/bf16 are stored as their 16-bit patterns; their arithmetic goes through f32.
enum class DType : uint8_t { f32, f16, bf16, f64, i64, i32, u8, boolean, i8 };

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::u8: case DType::i8: case DType::boolean: return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return !is_floating(t); }
const char* dtype_name(DType t);
DType parse_dtype(const std::string& name);  ///< "float32"/"f32", "float16", "bfloat16", "int64", ...
/// The type arithmetic of two operands is done in (f64 > f32 > bf16/f16 > i64 > i32 > i8/u8 > bool; int8 with uint8
/// is int32, the narrowest type here that holds both ranges).
DType promote_types(DType a, DType b);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

}  // namespace volt
