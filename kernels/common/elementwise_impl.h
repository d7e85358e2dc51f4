#pragma once
// Backend-generic drivers for the elementwise ops. A backend (kernels/cpu or kernels/cuda) includes this file
// with a struct B providing map1/map2/map3 templates; the enum-to-functor switch and the dtype dispatch are
// written once here, so both backends run the same functors from kernels/common/elementwise.h.
// (Functor structs rather than lambdas: nvcc does not allow __device__ lambdas inside generic lambdas.)
#include <type_traits>

#include <volt/kernels/common/dispatch.h>
#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/tensor.h>

namespace volt::elementwise_impl {

template <UnaryOp op, class T>
struct UnaryF {
  ElemParams p;
  VOLT_HD T operator()(T x) const {
    using A = acc_t<T>;
    if constexpr (std::is_same_v<T, bool>) return unary_fn<op, A>(A(x), p) != A(0);
    else return T(unary_fn<op, A>(A(x), p));
  }
};

template <BinaryOp op, class T>
struct BinaryF {
  ElemParams p;
  VOLT_HD T operator()(T x, T y) const {
    using A = acc_t<T>;
    return T(binary_fn<op, A>(A(x), A(y), p));
  }
};

template <CompareOp op, class T>
struct CompareF {
  VOLT_HD bool operator()(T x, T y) const {
    using A = acc_t<T>;
    return compare_fn<op, A>(A(x), A(y));
  }
};

template <class T>
struct WhereF {
  VOLT_HD T operator()(bool c, T x, T y) const { return c ? x : y; }
};

// Floating point to an integer type, defined for every input (C++ leaves NaN and out-of-range conversions
// undefined, and x86 and GPUs resolve them differently): NaN becomes 0; other values truncate toward zero,
// clamped to the int64 range; the int64 then wraps into O as integer narrowing does. So -1.0 is 255 as uint8 and
// 300.0 is 44, on every device.
template <class O, class F>
VOLT_HD O float_to_int(F x) {
  if (!(x == x)) return O(0);
  int64_t v;
  if (x >= F(9223372036854775808.0)) v = static_cast<int64_t>(0x7fffffffffffffffULL);
  else if (x < F(-9223372036854775808.0)) v = static_cast<int64_t>(0x8000000000000000ULL);
  else v = static_cast<int64_t>(x);
  return static_cast<O>(v);
}

template <class O, class I>
struct CastF {
  VOLT_HD O operator()(I x) const {
    if constexpr (std::is_same_v<O, bool>) return static_cast<acc_t<I>>(x) != acc_t<I>(0);
    else if constexpr (std::is_integral_v<O> && !std::is_integral_v<I>)
      return float_to_int<O>(static_cast<acc_t<I>>(x));
    else if constexpr ((std::is_same_v<O, Half> || std::is_same_v<O, BFloat16>) && std::is_same_v<I, double>)
      return O::from_double(x);  // one rounding, not double -> float -> half
    else if constexpr (std::is_same_v<I, Half> || std::is_same_v<I, BFloat16> || std::is_same_v<O, Half> ||
                       std::is_same_v<O, BFloat16>)
      return O(static_cast<float>(x));
    else return static_cast<O>(x);
  }
};

template <class B, UnaryOp op>
void unary_typed(const Tensor& out, const Tensor& in, const ElemParams& p) {
  dispatch_all(out.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    B::template map1<T, T>(out, in, UnaryF<op, T>{p});
  });
}

template <class B>
void unary(UnaryOp op, const Tensor& out, const Tensor& in, const ElemParams& p) {
  switch (op) {
#define VOLT_U(name) case UnaryOp::name: return unary_typed<B, UnaryOp::name>(out, in, p);
    VOLT_U(Neg) VOLT_U(Exp) VOLT_U(Log) VOLT_U(Sqrt) VOLT_U(Abs) VOLT_U(Relu) VOLT_U(LeakyRelu) VOLT_U(Sigmoid)
    VOLT_U(Tanh) VOLT_U(Gelu) VOLT_U(Clamp) VOLT_U(PowScalar) VOLT_U(AddScalar) VOLT_U(MulScalar)
    VOLT_U(RSubScalar) VOLT_U(RDivScalar) VOLT_U(Fill) VOLT_U(Sign) VOLT_U(Square) VOLT_U(Reciprocal) VOLT_U(Silu)
    VOLT_U(GeluTanh) VOLT_U(Sin) VOLT_U(Cos) VOLT_U(Erf) VOLT_U(Log1p) VOLT_U(Expm1) VOLT_U(Softplus) VOLT_U(Elu)
    VOLT_U(Mish) VOLT_U(Floor) VOLT_U(Round)
#undef VOLT_U
  }
}

template <class B, BinaryOp op>
void binary_typed(const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p) {
  dispatch_numeric(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    B::template map2<T, T, T>(out, a, b, BinaryF<op, T>{p});
  });
}

template <class B>
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p) {
  switch (op) {
#define VOLT_B(name) case BinaryOp::name: return binary_typed<B, BinaryOp::name>(out, a, b, p);
    VOLT_B(Add) VOLT_B(Sub) VOLT_B(Mul) VOLT_B(Div) VOLT_B(Pow) VOLT_B(Maximum) VOLT_B(Minimum) VOLT_B(ReluGrad)
    VOLT_B(LeakyReluGrad) VOLT_B(SigmoidGrad) VOLT_B(TanhGrad) VOLT_B(GeluGrad) VOLT_B(ClampGrad)
    VOLT_B(PowScalarGrad) VOLT_B(SiluGrad) VOLT_B(GeluTanhGrad) VOLT_B(SoftplusGrad) VOLT_B(EluGrad) VOLT_B(MishGrad)
#undef VOLT_B
  }
}

template <class B, CompareOp op>
void compare_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = decltype(tag);
    B::template map2<bool, T, T>(out, a, b, CompareF<op, T>{});
  });
}

template <class B>
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) {
    case CompareOp::Eq: return compare_typed<B, CompareOp::Eq>(out, a, b);
    case CompareOp::Ne: return compare_typed<B, CompareOp::Ne>(out, a, b);
    case CompareOp::Lt: return compare_typed<B, CompareOp::Lt>(out, a, b);
    case CompareOp::Le: return compare_typed<B, CompareOp::Le>(out, a, b);
    case CompareOp::Gt: return compare_typed<B, CompareOp::Gt>(out, a, b);
    case CompareOp::Ge: return compare_typed<B, CompareOp::Ge>(out, a, b);
  }
}

// out = cond ? a : b, with a and b of out's dtype.
template <class B>
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    B::template map3<T, bool, T, T>(out, cond, a, b, WhereF<T>{});
  });
}

// out = in converted to out's dtype (round to nearest even into f16/bf16; nonzero -> true into bool).
template <class B>
void cast(const Tensor& out, const Tensor& in) {
  dispatch_all(out.dtype(), "cast", [&](auto otag) {
    using O = decltype(otag);
    dispatch_all(in.dtype(), "cast", [&](auto itag) {
      using I = decltype(itag);
      B::template map1<O, I>(out, in, CastF<O, I>{});
    });
  });
}

}  // namespace volt::elementwise_impl
