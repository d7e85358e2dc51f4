#pragma once
// The dtype of a norm kernel's output y (and of y's gradient): x's own dtype, or f16/bf16 for f32 x, where the
// norm's output feeds a matmul under autocast (layer_norm_for_matmul, kernels/fused_ops.h) and is written in the
// dtype the matmul would cast it to. Host-side dispatch shared by the CPU and CUDA norm kernels.
#include <type_traits>

#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/half.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/dtype.h>
#include <volt/runtime/error.h>

namespace volt {

// Calls f(Y{}) with Y the element type of dtype `y` for a norm over x of element type T.
template <class T, class F>
void with_norm_out(DType y, const char* op, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (y == DType::f32) return f(float{});
    if (y == DType::bf16) return f(BFloat16{});
    if (y == DType::f16) return f(Half{});
  } else if constexpr (std::is_same_v<T, double>) {
    if (y == DType::f64) return f(double{});
  } else if constexpr (std::is_same_v<T, Half>) {
    if (y == DType::f16) return f(Half{});
  } else {
    if (y == DType::bf16) return f(BFloat16{});
  }
  VOLT_FAIL(op, ": output dtype ", dtype_name(y), " for x of another dtype; expected x's dtype (or float16 or ",
            "bfloat16 for float32 x)");
}

// Calls f(R{}) with R the element type of the residual r that residual_layer_norm adds to x (dtype x, element T)
// before a norm whose output has dtype y (element Y): r in x's dtype, or, for f32 x with a half output, in the
// output's dtype (a half sublayer output joining an f32 residual stream under autocast, read without a cast).
template <class T, class Y, class F>
void with_residual_type(DType x, DType y, DType r, const char* op, F&& f) {
  if (r == x) return f(T{});
  if constexpr (!std::is_same_v<T, Y>) {
    if (r == y) return f(Y{});
  }
  VOLT_FAIL(op, ": residual dtype ", dtype_name(r), " for x of dtype ", dtype_name(x), " and output of dtype ",
            dtype_name(y), "; expected x's dtype (or the output's half dtype for float32 x)");
}

// Calls f(T{}, Y{}) for a norm over x of dtype `x` whose output (or output gradient) has dtype `y`.
template <class F>
void dispatch_norm(DType x, DType y, const char* op, F&& f) {
  dispatch_floating(x, op, [&](auto tag) { with_norm_out<decltype(tag)>(y, op, [&](auto ytag) { f(tag, ytag); }); });
}

// residual_norm_bwd's grad_r as Y*, or nullptr when it is undefined: defined only for a residual stored in y's half
// dtype Y beside s of another dtype T, and then in that dtype.
template <class T, class Y>
Y* residual_grad_ptr(const Tensor& grad_r, DType grad_y, DType s) {
  if (!grad_r.defined()) return nullptr;
  VOLT_CHECK(!(std::is_same_v<T, Y>) && grad_r.dtype() == grad_y, "residual_norm_bwd: grad_r has dtype ",
             dtype_name(grad_r.dtype()), "; expected the half dtype of grad_y (", dtype_name(grad_y),
             ") for s of dtype ", dtype_name(s));
  return static_cast<Y*>(grad_r.data_ptr());
}

// Calls f(T{}, Y{}, R{}) for residual_layer_norm's forward over x of dtype `x`, output of dtype `y` and residual of
// dtype `r` (with_residual_type says which r are allowed).
template <class F>
void dispatch_residual_norm(DType x, DType y, DType r, const char* op, F&& f) {
  dispatch_norm(x, y, op, [&](auto tag, auto ytag) {
    with_residual_type<decltype(tag), decltype(ytag)>(x, y, r, op, [&](auto rtag) { f(tag, ytag, rtag); });
  });
}

}  // namespace volt
