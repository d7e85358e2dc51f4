#include <volt/runtime/dtype.h>

#include <volt/runtime/error.h>

namespace volt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::u8: return "uint8";
    case DType::i8: return "int8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(const std::string& n) {
  if (n == "float32" || n == "f32" || n == "float") return DType::f32;
  if (n == "float16" || n == "f16" || n == "half") return DType::f16;
  if (n == "bfloat16" || n == "bf16") return DType::bf16;
  if (n == "float64" || n == "f64" || n == "double") return DType::f64;
  if (n == "int64" || n == "i64" || n == "long") return DType::i64;
  if (n == "int32" || n == "i32" || n == "int") return DType::i32;
  if (n == "uint8" || n == "u8") return DType::u8;
  if (n == "int8" || n == "i8") return DType::i8;
  if (n == "bool") return DType::boolean;
  VOLT_FAIL("parse_dtype: unknown dtype '", n,
            "'; expected one of float32, float16, bfloat16, float64, int64, int32, int8, uint8, bool");
}

static int rank_of(DType t) {
  switch (t) {
    case DType::boolean: return 0;
    case DType::u8: case DType::i8: return 1;
    case DType::i32: return 2;
    case DType::i64: return 3;
    case DType::f16: return 4;
    case DType::bf16: return 5;
    case DType::f32: return 6;
    case DType::f64: return 7;
  }
  return 0;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 has no common 16-bit type: go to f32.
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  // int8 with uint8: neither holds the other's range; int32 holds both.
  if ((a == DType::i8 && b == DType::u8) || (a == DType::u8 && b == DType::i8)) return DType::i32;
  return rank_of(a) >= rank_of(b) ? a : b;
}

}  // namespace volt
