// The ops of kernels/math_ops.h. The forwards are one elementwise (or factory) kernel each; the backward formulas
// are written in differentiable ops over the inputs (attach_differentiable), so create_graph records them.
// softplus, elu and mish keep a one-kernel first-order backward (BinaryOp::SoftplusGrad, EluGrad, MishGrad) and
// take the composed formula only under create_graph.
#include <cmath>
#include <limits>
#include <string>

#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/factory.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/math_ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/philox_draw.h>
#include <volt/runtime/trace.h>

namespace volt {

namespace {

using Grads = std::vector<Tensor>;

// The input of a smooth function: integer and bool tensors become f32 (they cannot require grad, so no history
// is lost).
Tensor smooth_input(const Tensor& a, const char* name) {
  VOLT_CHECK(a.defined(), name, ": the input is undefined");
  return is_floating(a.dtype()) ? a : a.detach().to(DType::f32);
}

Tensor run_unary(UnaryOp op, const Tensor& x, const ElemParams& p = {}) {
  Tensor in = x.detach();
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  backend::call<&backend::ElementwiseKernels::unary>(out.device(), out.dtype(), op, out, in, p);
  return out;
}

// g * f'(x) in one kernel (first-order fast path): g and x have one shape.
Tensor run_grad(BinaryOp op, const Tensor& g, const Tensor& x, const ElemParams& p) {
  trace::Range range(trace::Layer::op, "backward");
  Tensor gg = g.detach(), in = x.detach();
  if (gg.dtype() != in.dtype()) gg = gg.to(in.dtype());
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  backend::call<&backend::ElementwiseKernels::binary>(out.device(), out.dtype(), op, out, gg.expand(in.shape()), in,
                                                      p);
  return out;
}

// A unary smooth op: the forward kernel and the differentiable formula d(x) -> g * f'(x).
template <class Formula>
Tensor smooth(UnaryOp op, const Tensor& a, const char* name, const char* node, Formula formula,
              const ElemParams& p = {}) {
  trace::Range range(trace::Layer::op, name);
  Tensor x = smooth_input(a, name);
  Tensor out = run_unary(op, x, p);
  autograd::attach_differentiable(out, node, {x}, [x, formula](const Grads& g) { return Grads{formula(g[0], x)}; });
  return out;
}

// floor / round: piecewise constant, gradient zero (a differentiable node, so it composes under create_graph).
Tensor rounding(UnaryOp op, const Tensor& a, const char* name, const char* node) {
  trace::Range range(trace::Layer::op, name);
  VOLT_CHECK(a.defined(), name, ": the input is undefined");
  VOLT_CHECK(a.dtype() != DType::boolean, name, ": bool input is not supported (expected a floating or integer "
             "tensor)");
  if (!is_floating(a.dtype())) return a.detach().clone();  // integers are whole already
  Tensor out = run_unary(op, a);
  autograd::attach_differentiable(out, node, {a}, [](const Grads& g) { return Grads{zeros_like(g[0])}; });
  return out;
}

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

}  // namespace

// ---- smooth unary functions ------------------------------------------------------------------------------

Tensor sin(const Tensor& a) {
  return smooth(UnaryOp::Sin, a, "sin", "SinBackward",
                [](const Tensor& g, const Tensor& x) { return mul(g, cos(x)); });
}
Tensor cos(const Tensor& a) {
  return smooth(UnaryOp::Cos, a, "cos", "CosBackward",
                [](const Tensor& g, const Tensor& x) { return neg(mul(g, sin(x))); });
}
Tensor erf(const Tensor& a) {
  return smooth(UnaryOp::Erf, a, "erf", "ErfBackward", [](const Tensor& g, const Tensor& x) {
    return mul(g, mul(exp(neg(square(x))), kTwoOverSqrtPi));
  });
}
Tensor log1p(const Tensor& a) {
  if (autocast_detail::wants_fp32(a)) return log1p(autocast_detail::fp32(a));
  return smooth(UnaryOp::Log1p, a, "log1p", "Log1pBackward",
                [](const Tensor& g, const Tensor& x) { return div(g, add(x, 1.0)); });
}
Tensor expm1(const Tensor& a) {
  if (autocast_detail::wants_fp32(a)) return expm1(autocast_detail::fp32(a));
  return smooth(UnaryOp::Expm1, a, "expm1", "Expm1Backward",
                [](const Tensor& g, const Tensor& x) { return mul(g, exp(x)); });
}

// ---- activations -----------------------------------------------------------------------------------------

Tensor softplus(const Tensor& a, double beta, double threshold) {
  VOLT_CHECK(beta != 0.0 && std::isfinite(beta), "softplus: beta must be nonzero and finite, got ", beta);
  VOLT_CHECK(!std::isnan(threshold), "softplus: threshold must not be NaN");
  if (autocast_detail::wants_fp32(a)) return softplus(autocast_detail::fp32(a), beta, threshold);
  ElemParams p;
  p.a = beta;
  p.b = threshold;
  return smooth(UnaryOp::Softplus, a, "softplus", "SoftplusBackward",
                [p](const Tensor& g, const Tensor& x) {
                  if (!autograd::create_graph_enabled()) return run_grad(BinaryOp::SoftplusGrad, g, x, p);
                  const Tensor z = mul(x, p.a);
                  return where(gt(z, p.b), g, mul(g, sigmoid(z)));
                },
                p);
}

Tensor elu(const Tensor& a, double alpha) {
  VOLT_CHECK(std::isfinite(alpha), "elu: alpha must be finite, got ", alpha);
  ElemParams p;
  p.a = alpha;
  return smooth(UnaryOp::Elu, a, "elu", "EluBackward",
                [p](const Tensor& g, const Tensor& x) {
                  if (!autograd::create_graph_enabled()) return run_grad(BinaryOp::EluGrad, g, x, p);
                  return where(gt(x, 0.0), g, mul(g, mul(exp(x), p.a)));
                },
                p);
}

Tensor mish(const Tensor& a) {
  return smooth(UnaryOp::Mish, a, "mish", "MishBackward", [](const Tensor& g, const Tensor& x) {
    if (!autograd::create_graph_enabled()) return run_grad(BinaryOp::MishGrad, g, x, ElemParams{});
    const Tensor t = tanh(softplus(x));  // threshold 20: tanh(x) = 1 there in every float type
    return mul(g, add(t, mul(mul(x, sigmoid(x)), rsub(square(t), 1.0))));
  });
}

// ---- rounding --------------------------------------------------------------------------------------------

Tensor floor(const Tensor& a) { return rounding(UnaryOp::Floor, a, "floor", "FloorBackward"); }
Tensor round(const Tensor& a) { return rounding(UnaryOp::Round, a, "round", "RoundBackward"); }

// ---- factories -------------------------------------------------------------------------------------------

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  trace::Range range(trace::Layer::op, "linspace");
  VOLT_CHECK(steps >= 0, "linspace: steps must be non-negative, got ", steps);
  VOLT_CHECK(dtype != DType::boolean, "linspace: bool is not a valid dtype for a range");
  VOLT_CHECK(std::isfinite(start) && std::isfinite(end), "linspace: start and end must be finite, got ", start,
             " and ", end);
  Tensor t = empty({steps}, dtype, device);
  if (steps > 0) backend::call<&backend::FactoryKernels::linspace>(device, t.dtype(), t, start, end);
  return t;
}

namespace {

// Checks randint's arguments; returns high - low.
uint64_t randint_range(int64_t low, int64_t high, DType dtype) {
  VOLT_CHECK(high > low, "randint: high (", high, ") must be greater than low (", low, ")");
  VOLT_CHECK(dtype != DType::boolean, "randint: dtype bool is not supported (expected an integer or floating "
             "dtype)");
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (dtype == DType::u8) lo = 0, hi = 255;
  else if (dtype == DType::i8) lo = -128, hi = 127;
  else if (dtype == DType::i32) lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  else if (is_floating(dtype)) {  // every integer of the range exact (as PyTorch checks): |v| <= 2^mantissa digits
    const int digits = dtype == DType::f64 ? 53 : dtype == DType::f32 ? 24 : dtype == DType::f16 ? 11 : 8;
    hi = int64_t{1} << digits;
    lo = -hi;
  }
  VOLT_CHECK(low >= lo && high - 1 <= hi, "randint: the range [", low, ", ", high, ") does not fit in dtype ",
             dtype_name(dtype), " (values ", lo, " to ", hi, ")");
  return static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
}

uint64_t randint_counters(int64_t n) { return static_cast<uint64_t>((n + 1) / 2); }  // two per counter

}  // namespace

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device, Generator* gen) {
  trace::Range range(trace::Layer::op, "randint");
  const uint64_t span = randint_range(low, high, dtype);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype, device);
  const PhiloxArgs rng = philox_draw(g, device, randint_counters(t.numel()));
  backend::call<&backend::FactoryKernels::randint>(device, t.dtype(), t, rng, low, span);
  return t;
}

Tensor randint(int64_t high, const Shape& shape, DType dtype, Device device, Generator* gen) {
  return randint(0, high, shape, dtype, device, gen);
}

Tensor randint_with_seed(int64_t low, int64_t high, const Shape& shape, uint64_t seed, uint64_t offset, DType dtype,
                         Device device) {
  trace::Range range(trace::Layer::op, "randint");
  const uint64_t span = randint_range(low, high, dtype);
  Tensor t = empty(shape, dtype, device);
  backend::call<&backend::FactoryKernels::randint>(device, t.dtype(), t, PhiloxArgs{seed, offset}, low, span);
  return t;
}

}  // namespace volt
