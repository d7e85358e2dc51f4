#pragma once
// Calls f(T{}) with T the C++ element type of a DType, so a kernel is written once as a generic lambda:
//   dispatch_all(t.dtype(), "relu", [&](auto tag) { using T = decltype(tag); ... });
#include <cstdint>

#include <volt/kernels/common/half.h>
#include <volt/runtime/dtype.h>
#include <volt/runtime/error.h>

namespace volt {

template <class F>
void dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::f16: f(Half{}); return;
    case DType::bf16: f(BFloat16{}); return;
    case DType::i64: f(int64_t{}); return;
    case DType::i32: f(int32_t{}); return;
    case DType::u8: f(uint8_t{}); return;
    case DType::i8: f(int8_t{}); return;
    case DType::boolean: f(bool{}); return;
  }
  VOLT_FAIL(op, ": unsupported dtype");
}

template <class F>
void dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::f16: f(Half{}); return;
    case DType::bf16: f(BFloat16{}); return;
    default: VOLT_FAIL(op, ": expected a floating-point tensor (float32, float64, float16, bfloat16) but got ",
                       dtype_name(t));
  }
}

// f32 and f64 only: the CPU kernels that compute half types through f32 (GEMM, convolution, pooling, batch norm).
template <class F>
void dispatch_f32_f64(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  VOLT_FAIL(op, " (CPU): dtype ", dtype_name(t), " is not supported; expected float32 or float64");
}

// Numeric types (no bool) for arithmetic.
template <class F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  VOLT_CHECK(t != DType::boolean, op, ": arithmetic is not defined for bool tensors; cast with to(DType) first");
  dispatch_all(t, op, std::forward<F>(f));
}

}  // namespace volt
