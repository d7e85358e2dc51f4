#include <cmath>
#include <string>

#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/derivatives.h>

namespace volt {

namespace {

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  VOLT_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  VOLT_CHECK(a.device() == b.device(), op, ": operands are on different devices (", a.device().str(), " and ",
             b.device().str(), "); move one with .to(device)");
}

// Broadcasts and promotes a and b; returns the output dtype.
DType prepare(Tensor& a, Tensor& b, Shape& out_shape, const char* op) {
  check_same_device(a, b, op);
  out_shape = broadcast_shapes(a.shape(), b.shape(), op);
  DType dt = promote_types(a.dtype(), b.dtype());
  NoGradGuard ng;  // the casts/expands here are part of this op's own backward
  if (a.dtype() != dt) a = a.detach().to(dt);
  if (b.dtype() != dt) b = b.detach().to(dt);
  if (a.shape() != out_shape) a = a.detach().expand(out_shape);
  if (b.shape() != out_shape) b = b.detach().expand(out_shape);
  return dt;
}

Tensor binary_op(BinaryOp op, const Tensor& a0, const Tensor& b0, const char* name, const ElemParams& p = {}) {
  trace::Range op_range(trace::Layer::op, name);
  Tensor a = a0, b = b0;
  Shape shape;
  DType dt = prepare(a, b, shape, name);
  Tensor out = empty(shape, dt, a.device());
  backend::call<&backend::ElementwiseKernels::binary>(out.device(), out.dtype(), op, out, a, b, p);
  return out;
}

Tensor unary_op(UnaryOp op, const Tensor& a, const char* name, const ElemParams& p = {}, bool floating_only = true) {
  trace::Range op_range(trace::Layer::op, name);
  VOLT_CHECK(a.defined(), name, ": the input is undefined");
  Tensor in = a.detach();
  if (floating_only && !is_floating(in.dtype())) in = in.to(DType::f32);
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  backend::call<&backend::ElementwiseKernels::unary>(out.device(), out.dtype(), op, out, in, p);
  return out;
}

// Backward helper: grad_in = f(grad, saved) elementwise.
Tensor grad_op(BinaryOp op, const Tensor& g, const Tensor& saved, const ElemParams& p = {}) {
  return binary_op(op, g, saved, "backward", p);
}

DType scalar_result_dtype(const Tensor& a, double s) {
  if (is_floating(a.dtype())) return a.dtype();
  return (s == static_cast<double>(static_cast<int64_t>(s))) && a.dtype() != DType::boolean ? a.dtype() : DType::f32;
}

Tensor scalar_op(UnaryOp op, const Tensor& a, double s, const char* name) {
  trace::Range op_range(trace::Layer::op, name);
  VOLT_CHECK(a.defined(), name, ": the input is undefined");
  Tensor in = a.detach();
  DType dt = scalar_result_dtype(a, s);
  if (in.dtype() != dt) in = in.to(dt);
  ElemParams p;
  p.a = s;
  Tensor out = empty(in.shape(), dt, in.device());
  backend::call<&backend::ElementwiseKernels::unary>(out.device(), out.dtype(), op, out, in, p);
  return out;
}

// clamp's backward: the gradient where the input was inside [lo, hi], zero elsewhere. The map is linear in the
// gradient and its own adjoint, so under create_graph it differentiates to itself, to any order.
Tensor clamp_grad(const Tensor& g, const Tensor& saved_in, const ElemParams& p) {
  Tensor r = grad_op(BinaryOp::ClampGrad, g.detach(), saved_in, p);
  return autograd::linear_in_grad(r, g, "ClampBackwardBackward",
                                  [saved_in, p](const Tensor& gg) { return clamp_grad(gg, saved_in, p); });
}


}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    VOLT_CHECK(x == y || x == 1 || y == 1, op, ": shapes ", shape_to_string(a), " and ", shape_to_string(b),
               " cannot be broadcast together (dim ", i, ": ", x, " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// gelu'(x) as a differentiable function of x (used by gelu's backward under create_graph).
//   exact:  Phi(x) + x phi(x), whose derivative is phi(x) (2 - x^2);
//   tanh:   0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)), composed of differentiable ops.
Tensor gelu_derivative(const Tensor& x, bool tanh_form) {
  if (tanh_form) {
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    Tensor x2 = square(x);
    Tensor t = tanh(mul(mul(x, add(mul(x2, c), 1.0)), k));
    Tensor inner = mul(add(mul(x2, 3.0 * c), 1.0), k);
    return add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, rsub(square(t), 1.0)), inner), 0.5));
  }
  Tensor xd = x.detach();
  Tensor d = grad_op(BinaryOp::GeluGrad, ones_like(xd), xd);
  autograd::attach_differentiable(d, "GeluDerivativeBackward", {x}, [x](const std::vector<Tensor>& g) {
    Tensor x2 = square(x);
    Tensor phi = mul(exp(mul(x2, -0.5)), 1.0 / std::sqrt(2.0 * M_PI));
    return std::vector<Tensor>{mul(g[0], mul(phi, rsub(x2, 2.0)))};
  });
  return d;
}

// ---- binary -------------------------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(BinaryOp::Add, a, b, "add");
  Shape sa = a.shape(), sb = b.shape();
  autograd::attach_differentiable(out, "AddBackward", {a, b}, [sa, sb](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sa), sum_to(g[0], sb)};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(BinaryOp::Sub, a, b, "sub");
  Shape sa = a.shape(), sb = b.shape();
  autograd::attach_differentiable(out, "SubBackward", {a, b}, [sa, sb](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], sa), sum_to(neg(g[0]), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(BinaryOp::Mul, a, b, "mul");
  bool ga = a.requires_grad(), gb = b.requires_grad();
  // Inputs are captured undetached (here and below): under create_graph the formula's ops record through them.
  Tensor sa = gb ? a : Tensor(), sb = ga ? b : Tensor();
  Shape sha = a.shape(), shb = b.shape();
  autograd::attach_differentiable(out, "MulBackward", {a, b}, [=](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{ga ? sum_to(mul(g[0], sb), sha) : Tensor(), gb ? sum_to(mul(g[0], sa), shb) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  // True division: integer operands give a float32 quotient (as in NumPy/PyTorch), never a truncated one.
  if (a.defined() && b.defined() && !is_floating(a.dtype()) && !is_floating(b.dtype()))
    return div(a.to(DType::f32), b.to(DType::f32));
  Tensor out = binary_op(BinaryOp::Div, a, b, "div");
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor sb = b, so = gb ? out.detach() : Tensor();
  Shape sha = a.shape(), shb = b.shape();
  autograd::attach_differentiable(out, "DivBackward", {a, b}, [=](const std::vector<Tensor>& g) {
    Tensor gdiv = div(g[0], sb);
    return std::vector<Tensor>{ga ? sum_to(gdiv, sha) : Tensor(),
                               gb ? sum_to(neg(mul(gdiv, autograd::saved_output(so))), shb) : Tensor()};
  });
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (autocast_detail::wants_fp32(a) || autocast_detail::wants_fp32(b))
    return pow(autocast_detail::fp32(a), autocast_detail::fp32(b));
  Tensor out = binary_op(BinaryOp::Pow, a, b, "pow");
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor sa = a, sb = b, so = out.detach();
  Shape sha = a.shape(), shb = b.shape();
  autograd::attach_differentiable(out, "PowBackward", {a, b}, [=](const std::vector<Tensor>& g) {
    Tensor da, db;
    if (ga) da = sum_to(mul(g[0], mul(sb, pow(sa, sub(sb, 1.0)))), sha);
    if (gb) db = sum_to(mul(g[0], mul(autograd::saved_output(so), log(sa))), shb);
    return std::vector<Tensor>{da, db};
  });
  return out;
}

static Tensor extremum(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor out = binary_op(is_max ? BinaryOp::Maximum : BinaryOp::Minimum, a, b, is_max ? "maximum" : "minimum");
  Tensor sa = a.detach(), sb = b.detach();  // only compared: the winner mask is constant
  Shape sha = a.shape(), shb = b.shape();
  autograd::attach_differentiable(out, is_max ? "MaximumBackward" : "MinimumBackward", {a, b}, [=](const std::vector<Tensor>& g) {
    // The winner takes the gradient; a tie splits it evenly (the subgradient PyTorch uses).
    DType dt = g[0].dtype();
    Tensor wa = add((is_max ? gt(sa, sb) : lt(sa, sb)).to(dt), mul(eq(sa, sb).to(dt), 0.5));
    return std::vector<Tensor>{sum_to(mul(g[0], wa), sha), sum_to(mul(g[0], rsub(wa, 1.0)), shb)};
  });
  return out;
}
Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(a, b, false); }

// ---- scalar variants ----------------------------------------------------------------------------------------

Tensor add(const Tensor& a, double s) {
  Tensor out = scalar_op(UnaryOp::AddScalar, a, s, "add");
  autograd::attach_differentiable(out, "AddScalarBackward", {a}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}
Tensor sub(const Tensor& a, double s) { return add(a, -s); }
Tensor mul(const Tensor& a, double s) {
  Tensor out = scalar_op(UnaryOp::MulScalar, a, s, "mul");
  autograd::attach_differentiable(out, "MulScalarBackward", {a}, [s](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(g[0], s)};
  });
  return out;
}
Tensor div(const Tensor& a, double s) {
  if (!is_floating(a.dtype())) return div(a.to(DType::f32), s);
  return mul(a, 1.0 / s);
}
Tensor rsub(const Tensor& a, double s) {
  Tensor out = scalar_op(UnaryOp::RSubScalar, a, s, "rsub");
  autograd::attach_differentiable(out, "RSubBackward", {a}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{neg(g[0])}; });
  return out;
}
Tensor rdiv(const Tensor& a, double s) {
  if (autocast_detail::wants_fp32(a)) return rdiv(autocast_detail::fp32(a), s);
  Tensor in = is_floating(a.dtype()) ? a : a.to(DType::f32);
  Tensor out = scalar_op(UnaryOp::RDivScalar, in, s, "rdiv");
  Tensor so = out.detach(), sa = in;
  autograd::attach_differentiable(out, "RDivBackward", {in}, [so, sa](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{neg(div(mul(g[0], autograd::saved_output(so)), sa))};  // d(s/a) = -s/a^2 = -out/a
  });
  return out;
}
Tensor pow(const Tensor& a, double e) {
  if (autocast_detail::wants_fp32(a)) return pow(autocast_detail::fp32(a), e);
  ElemParams p;
  p.a = e;
  Tensor out = unary_op(UnaryOp::PowScalar, a, "pow", p);
  Tensor sa = a;
  autograd::attach_differentiable(out, "PowScalarBackward", {a}, [sa, p, e](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) return std::vector<Tensor>{mul(g[0], mul(pow(sa, e - 1.0), e))};
    return std::vector<Tensor>{grad_op(BinaryOp::PowScalarGrad, g[0], sa.detach(), p)};
  });
  return out;
}

// ---- unary --------------------------------------------------------------------------------------------------

Tensor neg(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Neg, a, "neg", {}, false);
  autograd::attach_differentiable(out, "NegBackward", {a}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{neg(g[0])}; });
  return out;
}
Tensor exp(const Tensor& a) {
  if (autocast_detail::wants_fp32(a)) return exp(autocast_detail::fp32(a));
  Tensor out = unary_op(UnaryOp::Exp, a, "exp");
  Tensor so = out.detach();
  autograd::attach_differentiable(out, "ExpBackward", {a}, [so](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(g[0], autograd::saved_output(so))};
  });
  return out;
}
Tensor log(const Tensor& a) {
  if (autocast_detail::wants_fp32(a)) return log(autocast_detail::fp32(a));
  Tensor out = unary_op(UnaryOp::Log, a, "log");
  Tensor sa = a;
  autograd::attach_differentiable(out, "LogBackward", {a}, [sa](const std::vector<Tensor>& g) { return std::vector<Tensor>{div(g[0], sa)}; });
  return out;
}
Tensor sqrt(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Sqrt, a, "sqrt");
  Tensor so = out.detach();
  autograd::attach_differentiable(out, "SqrtBackward", {a}, [so](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{div(mul(g[0], 0.5), autograd::saved_output(so))};
  });
  return out;
}
Tensor abs(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Abs, a, "abs", {}, false);
  Tensor sa = a.detach();  // sign(a) is piecewise constant
  autograd::attach_differentiable(out, "AbsBackward", {a}, [sa](const std::vector<Tensor>& g) { return std::vector<Tensor>{mul(g[0], sign(sa))}; });
  return out;
}
Tensor square(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Square, a, "square", {}, false);
  Tensor sa = a;
  autograd::attach_differentiable(out, "SquareBackward", {a}, [sa](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(mul(g[0], sa), 2.0)};
  });
  return out;
}
Tensor sign(const Tensor& a) { return unary_op(UnaryOp::Sign, a, "sign", {}, false); }
Tensor relu(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Relu, a, "relu", {}, false);
  Tensor so = out.detach();
  autograd::attach_differentiable(out, "ReluBackward", {a}, [so](const std::vector<Tensor>& g) {
    // Under create_graph: the same mask as a constant factor (the second derivative is zero).
    if (autograd::create_graph_enabled()) return std::vector<Tensor>{mul(g[0], gt(so, 0.0).to(g[0].dtype()))};
    return std::vector<Tensor>{grad_op(BinaryOp::ReluGrad, g[0], so)};
  });
  return out;
}
Tensor leaky_relu(const Tensor& a, double slope) {
  ElemParams p;
  p.a = slope;
  Tensor out = unary_op(UnaryOp::LeakyRelu, a, "leaky_relu", p);
  Tensor sa = a.detach();
  autograd::attach_differentiable(out, "LeakyReluBackward", {a}, [sa, p](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) return std::vector<Tensor>{where(gt(sa, 0.0), g[0], mul(g[0], p.a))};
    return std::vector<Tensor>{grad_op(BinaryOp::LeakyReluGrad, g[0], sa, p)};
  });
  return out;
}
Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Sigmoid, a, "sigmoid");
  Tensor so = out.detach();
  autograd::attach_differentiable(out, "SigmoidBackward", {a}, [so](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) {  // g * y * (1 - y), through the output
      Tensor y = autograd::saved_output(so);
      return std::vector<Tensor>{mul(g[0], mul(y, rsub(y, 1.0)))};
    }
    return std::vector<Tensor>{grad_op(BinaryOp::SigmoidGrad, g[0], so)};
  });
  return out;
}
Tensor tanh(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Tanh, a, "tanh");
  Tensor so = out.detach();
  autograd::attach_differentiable(out, "TanhBackward", {a}, [so](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) {  // g * (1 - y^2), through the output
      Tensor y = autograd::saved_output(so);
      return std::vector<Tensor>{mul(g[0], rsub(square(y), 1.0))};
    }
    return std::vector<Tensor>{grad_op(BinaryOp::TanhGrad, g[0], so)};
  });
  return out;
}
Tensor gelu(const Tensor& a, GeluApproximate approximate) {
  const bool tanh_form = approximate == GeluApproximate::Tanh;
  Tensor out = unary_op(tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, a, "gelu");
  Tensor sa = a;
  autograd::attach_differentiable(out, "GeluBackward", {a}, [sa, tanh_form](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) return std::vector<Tensor>{mul(g[0], gelu_derivative(sa, tanh_form))};
    return std::vector<Tensor>{grad_op(tanh_form ? BinaryOp::GeluTanhGrad : BinaryOp::GeluGrad, g[0], sa.detach())};
  });
  return out;
}
GeluApproximate parse_gelu_approximate(std::string_view approximate) {
  if (approximate == "none") return GeluApproximate::None;
  if (approximate == "tanh") return GeluApproximate::Tanh;
  VOLT_FAIL("gelu: approximate must be \"none\" or \"tanh\", got \"", std::string(approximate), "\"");
}
Tensor gelu(const Tensor& a, std::string_view approximate) { return gelu(a, parse_gelu_approximate(approximate)); }
Tensor silu(const Tensor& a) {
  Tensor out = unary_op(UnaryOp::Silu, a, "silu");
  Tensor sa = a;
  autograd::attach_differentiable(out, "SiluBackward", {a}, [sa](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled()) {  // silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
      Tensor s = sigmoid(sa);
      return std::vector<Tensor>{mul(g[0], mul(s, add(mul(sa, rsub(s, 1.0)), 1.0)))};
    }
    return std::vector<Tensor>{grad_op(BinaryOp::SiluGrad, g[0], sa.detach())};
  });
  return out;
}
Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  VOLT_CHECK(!(lo && hi) || *lo <= *hi, "clamp: lo (", lo.value_or(0), ") must not exceed hi (", hi.value_or(0), ")");
  ElemParams p;
  p.has_lo = lo.has_value();
  p.has_hi = hi.has_value();
  p.a = lo.value_or(0);
  p.b = hi.value_or(0);
  Tensor out = unary_op(UnaryOp::Clamp, a, "clamp", p, false);
  Tensor sa = a.detach();
  autograd::attach_differentiable(out, "ClampBackward", {a}, [sa, p](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{clamp_grad(g[0], sa, p)};
  });
  return out;
}

// ---- comparisons and where ------------------------------------------------------------------------------------

static Tensor compare_op(CompareOp op, const Tensor& a0, const Tensor& b0, const char* name) {
  Tensor a = a0.detach(), b = b0.detach();
  Shape shape;
  prepare(a, b, shape, name);
  Tensor out = empty(shape, DType::boolean, a.device());
  backend::call<&backend::ElementwiseKernels::compare>(out.device(), a.dtype(), op, out, a, b);
  return out;
}
static Tensor scalar_like(const Tensor& a, double s) {
  return full({}, s, is_floating(a.dtype()) ? a.dtype() : (s == static_cast<double>(static_cast<int64_t>(s)) ? a.dtype() : DType::f64), a.device());
}
Tensor eq(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Ge, a, b, "ge"); }
Tensor eq(const Tensor& a, double s) { return eq(a, scalar_like(a, s)); }
Tensor ne(const Tensor& a, double s) { return ne(a, scalar_like(a, s)); }
Tensor lt(const Tensor& a, double s) { return lt(a, scalar_like(a, s)); }
Tensor le(const Tensor& a, double s) { return le(a, scalar_like(a, s)); }
Tensor gt(const Tensor& a, double s) { return gt(a, scalar_like(a, s)); }
Tensor ge(const Tensor& a, double s) { return ge(a, scalar_like(a, s)); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  VOLT_CHECK(cond.defined() && cond.dtype() == DType::boolean, "where: cond must be a bool tensor, got ",
             cond.defined() ? dtype_name(cond.dtype()) : "undefined");
  check_same_device(cond, a, "where");
  Tensor x = a.detach(), y = b.detach();
  Shape shape;
  DType dt = prepare(x, y, shape, "where");
  shape = broadcast_shapes(shape, cond.shape(), "where");
  Tensor c = cond.detach().expand(shape);
  x = x.expand(shape);
  y = y.expand(shape);
  Tensor out = empty(shape, dt, x.device());
  backend::call<&backend::ElementwiseKernels::where>(out.device(), out.dtype(), out, c, x, y);
  Shape sa = a.shape(), sb = b.shape();
  autograd::attach_differentiable(out, "WhereBackward", {a, b}, [c, sa, sb](const std::vector<Tensor>& g) {
    Tensor z = zeros_like(g[0]);
    return std::vector<Tensor>{sum_to(where(c, g[0], z), sa), sum_to(where(c, z, g[0]), sb)};
  });
  return out;
}

// ---- operators and in-place ------------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return div(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }

static void check_inplace_target(const Tensor& a, const Tensor& b, const char* op) {
  VOLT_CHECK(a.defined(), op, ": the tensor is undefined");
  VOLT_CHECK(!(autograd::grad_enabled() && a.requires_grad()), op, ": in-place update of a tensor that requires "
             "grad while grad mode is on; wrap it in a NoGradGuard");
  if (b.defined()) {
    check_same_device(a, b, op);
    Shape s = broadcast_shapes(a.shape(), b.shape(), op);
    VOLT_CHECK(s == a.shape(), op, ": operand of shape ", b.shape_str(), " does not broadcast to the target ", a.shape_str());
  }
}

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  check_inplace_target(a, b, "add_");
  NoGradGuard ng;
  Tensor rhs = b.detach();
  if (rhs.dtype() != a.dtype()) rhs = rhs.to(a.dtype());
  rhs = rhs.expand(a.shape());
  if (alpha != 1.0) rhs = mul(rhs, alpha);
  backend::call<&backend::ElementwiseKernels::binary>(a.device(), a.dtype(), BinaryOp::Add, a, a, rhs.expand(a.shape()),
                                                      ElemParams{});
  return a;
}

Tensor& mul_(Tensor& a, double s) {
  check_inplace_target(a, Tensor(), "mul_");
  ElemParams p;
  p.a = s;
  backend::call<&backend::ElementwiseKernels::unary>(a.device(), a.dtype(), UnaryOp::MulScalar, a, a, p);
  return a;
}

Tensor& mul_(Tensor& a, const Tensor& b) {
  check_inplace_target(a, b, "mul_");
  NoGradGuard ng;
  Tensor rhs = b.detach();
  if (rhs.dtype() != a.dtype()) rhs = rhs.to(a.dtype());
  backend::call<&backend::ElementwiseKernels::binary>(a.device(), a.dtype(), BinaryOp::Mul, a, a, rhs.expand(a.shape()),
                                                      ElemParams{});
  return a;
}

}  // namespace volt
