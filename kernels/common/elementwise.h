#pragma once
// Per-element math of the elementwise ops and their derivatives, shared by the CPU loops and CUDA kernels.
// Every functor computes in the accumulation type A (float for f16/bf16, int64 for small integers).
#include <cmath>
#include <cstdint>

#include <volt/kernels/common/macros.h>

namespace volt {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Abs, Relu, LeakyRelu, Sigmoid, Tanh, Gelu, Clamp, PowScalar, AddScalar, MulScalar,
  RSubScalar, RDivScalar, Fill, Sign, Square, Reciprocal, Silu, GeluTanh,
  // kernels/math_ops.h
  Sin, Cos, Erf, Log1p, Expm1, Softplus, Elu, Mish, Floor, Round
};
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  // derivatives: f(grad, saved) -> input gradient
  ReluGrad, LeakyReluGrad, SigmoidGrad, TanhGrad, GeluGrad, ClampGrad, PowScalarGrad, SiluGrad, GeluTanhGrad,
  // kernels/math_ops.h (first-order fast paths; y = the input)
  SoftplusGrad, EluGrad, MishGrad
};
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

// Scalar parameters of an op (alpha for leaky_relu, lo/hi for clamp, the exponent, the scalar operand; beta and
// threshold for softplus, alpha for elu).
struct ElemParams {
  double a = 0, b = 0;
  bool has_lo = false, has_hi = false;
};

namespace em {  // overloads that resolve the same way in host and device code
VOLT_HD float exp_(float x) { return ::expf(x); }
VOLT_HD double exp_(double x) { return ::exp(x); }
VOLT_HD float log_(float x) { return ::logf(x); }
VOLT_HD double log_(double x) { return ::log(x); }
VOLT_HD float sqrt_(float x) { return ::sqrtf(x); }
VOLT_HD double sqrt_(double x) { return ::sqrt(x); }
VOLT_HD float tanh_(float x) { return ::tanhf(x); }
VOLT_HD double tanh_(double x) { return ::tanh(x); }
VOLT_HD float erf_(float x) { return ::erff(x); }
VOLT_HD double erf_(double x) { return ::erf(x); }
VOLT_HD float pow_(float x, float y) { return ::powf(x, y); }
VOLT_HD double pow_(double x, double y) { return ::pow(x, y); }
// Integer overloads exist so every op instantiates for every dtype; the public ops route integer inputs of
// the transcendental functions through float32 first.
VOLT_HD double exp_(int64_t x) { return ::exp(static_cast<double>(x)); }
VOLT_HD double log_(int64_t x) { return ::log(static_cast<double>(x)); }
VOLT_HD double sqrt_(int64_t x) { return ::sqrt(static_cast<double>(x)); }
VOLT_HD double tanh_(int64_t x) { return ::tanh(static_cast<double>(x)); }
VOLT_HD double erf_(int64_t x) { return ::erf(static_cast<double>(x)); }
VOLT_HD float sin_(float x) { return ::sinf(x); }
VOLT_HD double sin_(double x) { return ::sin(x); }
VOLT_HD double sin_(int64_t x) { return ::sin(static_cast<double>(x)); }
VOLT_HD float cos_(float x) { return ::cosf(x); }
VOLT_HD double cos_(double x) { return ::cos(x); }
VOLT_HD double cos_(int64_t x) { return ::cos(static_cast<double>(x)); }
VOLT_HD float log1p_(float x) { return ::log1pf(x); }
VOLT_HD double log1p_(double x) { return ::log1p(x); }
VOLT_HD double log1p_(int64_t x) { return ::log1p(static_cast<double>(x)); }
VOLT_HD float expm1_(float x) { return ::expm1f(x); }
VOLT_HD double expm1_(double x) { return ::expm1(x); }
VOLT_HD double expm1_(int64_t x) { return ::expm1(static_cast<double>(x)); }
// floor and round (half to even: rint under the default rounding mode, on the host and on the GPU); integers
// are already whole.
VOLT_HD float floor_(float x) { return ::floorf(x); }
VOLT_HD double floor_(double x) { return ::floor(x); }
VOLT_HD int64_t floor_(int64_t x) { return x; }
VOLT_HD float round_(float x) { return ::rintf(x); }
VOLT_HD double round_(double x) { return ::rint(x); }
VOLT_HD int64_t round_(int64_t x) { return x; }
template <class A> VOLT_HD A pow_(A x, A y) {  // integers: exact repeated multiplication
  if (y < 0) {  // x^y = 1 / x^|y| truncated toward zero: nonzero only for x = +-1
    if (x == 1) return 1;
    if (x == -1) return (y & 1) ? A(-1) : A(1);
    return 0;
  }
  A r = 1;
  while (y > 0) { if (y & 1) r *= x; x *= x; y >>= 1; }
  return r;
}
template <class A> VOLT_HD A abs_(A x) { return x < A(0) ? -x : x; }
template <class A> VOLT_HD A sigmoid_(A x) {
  // Split by sign so exp never overflows.
  if (x >= A(0)) return A(1) / (A(1) + exp_(-x));
  A e = exp_(x);
  return e / (A(1) + e);
}
template <class A> VOLT_HD A gelu_(A x) { return A(0.5) * x * (A(1) + erf_(x * A(0.70710678118654752440))); }
template <class A> VOLT_HD A gelu_grad_(A x) {
  A cdf = A(0.5) * (A(1) + erf_(x * A(0.70710678118654752440)));
  A pdf = exp_(A(-0.5) * x * x) * A(0.39894228040143267794);
  return cdf + x * pdf;
}
// tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class A> VOLT_HD A gelu_tanh_(A x) {
  const A u = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
  return A(0.5) * x * (A(1) + tanh_(u));
}
template <class A> VOLT_HD A gelu_tanh_grad_(A x) {
  const A k = A(0.79788456080286535588), c = A(0.044715);
  const A t = tanh_(k * (x + c * x * x * x));
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x);
}
// silu(x) = x sigmoid(x); d/dx = s (1 + x (1 - s))
template <class A> VOLT_HD A silu_(A x) { return x * sigmoid_(x); }
template <class A> VOLT_HD A silu_grad_(A x) {
  const A s = sigmoid_(x);
  return s * (A(1) + x * (A(1) - s));
}
// softplus(x) = log(1 + exp(beta x)) / beta, or x where beta x > threshold (PyTorch's linear branch).
template <class A> VOLT_HD A softplus_(A x, A beta, A threshold) {
  const A z = A(x * beta);
  if (z > threshold) return x;
  return A(log1p_(exp_(z)) / beta);
}
template <class A> VOLT_HD A softplus_grad_(A x, A beta, A threshold) {  // sigmoid(beta x), or 1
  const A z = A(x * beta);
  return z > threshold ? A(1) : sigmoid_(z);
}
// elu(x) = x for x > 0, alpha (exp(x) - 1) otherwise; d/dx = 1 or alpha exp(x) (alpha at 0, as PyTorch).
template <class A> VOLT_HD A elu_(A x, A alpha) { return x > A(0) ? x : A(alpha * expm1_(x)); }
template <class A> VOLT_HD A elu_grad_(A x, A alpha) { return x > A(0) ? A(1) : A(alpha * exp_(x)); }
// mish(x) = x tanh(softplus(x)); d/dx = t + x sigmoid(x) (1 - t^2) with t = tanh(softplus(x)).
template <class A> VOLT_HD A mish_(A x) { return A(x * tanh_(log1p_(exp_(x)))); }
template <class A> VOLT_HD A mish_grad_(A x) {
  const A t = A(tanh_(log1p_(exp_(x))));
  return A(t + x * sigmoid_(x) * (A(1) - t * t));
}
}  // namespace em

template <UnaryOp op, class A>
VOLT_HD A unary_fn(A x, const ElemParams& p) {
  if constexpr (op == UnaryOp::Neg) return -x;
  else if constexpr (op == UnaryOp::Exp) return em::exp_(x);
  else if constexpr (op == UnaryOp::Log) return em::log_(x);
  else if constexpr (op == UnaryOp::Sqrt) return em::sqrt_(x);
  else if constexpr (op == UnaryOp::Abs) return em::abs_(x);
  else if constexpr (op == UnaryOp::Relu) return x > A(0) ? x : A(0);
  else if constexpr (op == UnaryOp::LeakyRelu) return x > A(0) ? x : A(x * A(p.a));
  else if constexpr (op == UnaryOp::Sigmoid) return em::sigmoid_(x);
  else if constexpr (op == UnaryOp::Tanh) return em::tanh_(x);
  else if constexpr (op == UnaryOp::Gelu) return em::gelu_(x);
  else if constexpr (op == UnaryOp::Clamp) {
    if (x != x) return x;  // NaN passes through
    if (p.has_lo && x < A(p.a)) x = A(p.a);
    if (p.has_hi && x > A(p.b)) x = A(p.b);
    return x;
  } else if constexpr (op == UnaryOp::PowScalar) return em::pow_(x, A(p.a));
  else if constexpr (op == UnaryOp::AddScalar) return A(x + A(p.a));
  else if constexpr (op == UnaryOp::MulScalar) return A(x * A(p.a));
  else if constexpr (op == UnaryOp::RSubScalar) return A(A(p.a) - x);
  else if constexpr (op == UnaryOp::RDivScalar) return A(A(p.a) / x);
  else if constexpr (op == UnaryOp::Fill) return A(p.a);
  else if constexpr (op == UnaryOp::Sign) return x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0));
  else if constexpr (op == UnaryOp::Square) return A(x * x);
  else if constexpr (op == UnaryOp::Reciprocal) return A(A(1) / x);
  else if constexpr (op == UnaryOp::Silu) return em::silu_(x);
  else if constexpr (op == UnaryOp::GeluTanh) return em::gelu_tanh_(x);
  else if constexpr (op == UnaryOp::Sin) return A(em::sin_(x));
  else if constexpr (op == UnaryOp::Cos) return A(em::cos_(x));
  else if constexpr (op == UnaryOp::Erf) return A(em::erf_(x));
  else if constexpr (op == UnaryOp::Log1p) return A(em::log1p_(x));
  else if constexpr (op == UnaryOp::Expm1) return A(em::expm1_(x));
  else if constexpr (op == UnaryOp::Softplus) return em::softplus_(x, A(p.a), A(p.b));
  else if constexpr (op == UnaryOp::Elu) return em::elu_(x, A(p.a));
  else if constexpr (op == UnaryOp::Mish) return em::mish_(x);
  else if constexpr (op == UnaryOp::Floor) return em::floor_(x);
  else if constexpr (op == UnaryOp::Round) return em::round_(x);
  else return x;
}

template <BinaryOp op, class A>
VOLT_HD A binary_fn(A x, A y, const ElemParams& p) {
  if constexpr (op == BinaryOp::Add) return A(x + y);
  else if constexpr (op == BinaryOp::Sub) return A(x - y);
  else if constexpr (op == BinaryOp::Mul) return A(x * y);
  else if constexpr (op == BinaryOp::Div) return A(x / y);
  else if constexpr (op == BinaryOp::Pow) return em::pow_(x, y);
  else if constexpr (op == BinaryOp::Maximum) return (x != x || x > y) ? x : y;
  else if constexpr (op == BinaryOp::Minimum) return (x != x || x < y) ? x : y;
  // derivatives: x = incoming gradient, y = the saved input (or output)
  else if constexpr (op == BinaryOp::ReluGrad) return y > A(0) ? x : A(0);
  else if constexpr (op == BinaryOp::LeakyReluGrad) return y > A(0) ? x : A(x * A(p.a));
  else if constexpr (op == BinaryOp::SigmoidGrad) return A(x * y * (A(1) - y));      // y = sigmoid output
  else if constexpr (op == BinaryOp::TanhGrad) return A(x * (A(1) - y * y));         // y = tanh output
  else if constexpr (op == BinaryOp::GeluGrad) return A(x * em::gelu_grad_(y));      // y = input
  else if constexpr (op == BinaryOp::ClampGrad)                                        // y = input
    return ((p.has_lo && y < A(p.a)) || (p.has_hi && y > A(p.b))) ? A(0) : x;
  else if constexpr (op == BinaryOp::PowScalarGrad)                                    // y = input
    return A(x * A(p.a) * em::pow_(y, A(p.a - 1)));
  else if constexpr (op == BinaryOp::SiluGrad) return A(x * em::silu_grad_(y));           // y = input
  else if constexpr (op == BinaryOp::GeluTanhGrad) return A(x * em::gelu_tanh_grad_(y));  // y = input
  else if constexpr (op == BinaryOp::SoftplusGrad) return A(x * em::softplus_grad_(y, A(p.a), A(p.b)));  // y = input
  else if constexpr (op == BinaryOp::EluGrad) return A(x * em::elu_grad_(y, A(p.a)));    // y = input
  else if constexpr (op == BinaryOp::MishGrad) return A(x * em::mish_grad_(y));          // y = input
  else return x;
}

template <CompareOp op, class A>
VOLT_HD bool compare_fn(A x, A y) {
  if constexpr (op == CompareOp::Eq) return x == y;
  else if constexpr (op == CompareOp::Ne) return x != y;
  else if constexpr (op == CompareOp::Lt) return x < y;
  else if constexpr (op == CompareOp::Le) return x <= y;
  else if constexpr (op == CompareOp::Gt) return x > y;
  else return x >= y;
}

}  // namespace volt
