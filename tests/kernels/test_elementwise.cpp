// Every elementwise op against a std:: reference (f64 and f32), and its gradient against central finite
// differences on contiguous, transposed, sliced and broadcast inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "common/gradcheck.h"

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input domain (kept away from kinks and poles)
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.2, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.2, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, -2, 2},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -2, 2},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -2, 2},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, [](double x) { return x > 0 ? x : 0.1 * x; },
       -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, -4, 4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, -3, 3},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); },
       [](double x) { return std::min(std::max(x, -0.5), 0.7); }, -2, 2},
      {"clamp_lo", [](const Tensor& x) { return clamp(x, 0.1, std::nullopt); }, [](double x) { return std::max(x, 0.1); },
       -2, 2},
      {"clamp_hi", [](const Tensor& x) { return clamp(x, std::nullopt, 0.1); }, [](double x) { return std::min(x, 0.1); },
       -2, 2},
      {"pow_scalar", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 0.2, 2},
      {"pow_neg", [](const Tensor& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, 0.5, 2},
      {"add_scalar", [](const Tensor& x) { return add(x, 1.5); }, [](double x) { return x + 1.5; }, -2, 2},
      {"sub_scalar", [](const Tensor& x) { return sub(x, 1.5); }, [](double x) { return x - 1.5; }, -2, 2},
      {"mul_scalar", [](const Tensor& x) { return mul(x, -3.0); }, [](double x) { return x * -3.0; }, -2, 2},
      {"div_scalar", [](const Tensor& x) { return div(x, 4.0); }, [](double x) { return x / 4.0; }, -2, 2},
      {"rsub", [](const Tensor& x) { return rsub(x, 2.0); }, [](double x) { return 2.0 - x; }, -2, 2},
      {"rdiv", [](const Tensor& x) { return rdiv(x, 2.0); }, [](double x) { return 2.0 / x; }, 0.3, 2},
      {"op_scalar_mix", [](const Tensor& x) { return (2.0 - x) * 3.0 / (x + 4.0) - 1.0 + 1.0 / (x + 5.0); },
       [](double x) { return (2.0 - x) * 3.0 / (x + 4.0) - 1.0 + 1.0 / (x + 5.0); }, -2, 2},
  };
}

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double alo, ahi, blo, bhi;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }, -2, 2, -2, 2},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }, -2, 2, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }, -2, 2, -2, 2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, -2, 2, 0.5, 2},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); },
       0.3, 2, -1.5, 1.5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -2, 2, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -2, 2, -2, 2},
      {"operators", [](const Tensor& a, const Tensor& b) { return (a + b) * a - b / (a * a + 1.0) + (-a); },
       [](double a, double b) { return (a + b) * a - b / (a * a + 1.0) - a; }, -2, 2, -2, 2},
  };
}

std::vector<double> map_ref(const std::vector<double>& x, const std::function<double(double)>& f) {
  std::vector<double> y;
  for (double v : x) y.push_back(f(v));
  return y;
}

}  // namespace

TEST(ElementwiseUnary, ForwardMatchesStdReferenceF64AndF32) {
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = rand_f64({3, 5}, 100, c.lo, c.hi);
    std::vector<double> xv = x.to_vector<double>();
    Tensor y = c.op(x);
    EXPECT_EQ(y.dtype(), DType::f64);
    EXPECT_EQ(y.shape(), x.shape());
    expect_close(y, map_ref(xv, c.ref), 1e-12, 1e-12);
    Tensor xf = x.to(DType::f32);
    Tensor yf = c.op(xf);
    EXPECT_EQ(yf.dtype(), DType::f32);
    expect_close(yf, map_ref(xf.to_vector<double>(), c.ref), 1e-5, 1e-5);
  }
}

TEST(ElementwiseUnary, NonContiguousForward) {
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor base = rand_f64({4, 6}, 101, c.lo, c.hi);
    Tensor xt = base.t();                 // transposed
    Tensor xs = base.slice(1, 1, 6, 2);   // strided slice
    expect_close(c.op(xt), map_ref(xt.contiguous().to_vector<double>(), c.ref), 1e-12, 1e-12);
    expect_close(c.op(xs), map_ref(xs.contiguous().to_vector<double>(), c.ref), 1e-12, 1e-12);
  }
}

TEST(ElementwiseUnary, GradientsContiguousTransposedSliced) {
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = rand_f64({4, 3}, 102, c.lo, c.hi).set_requires_grad();
    auto op = c.op;
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0].t()); }, {x});
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0].slice(0, 1, 4, 2)); }, {x});
  }
}

TEST(ElementwiseBinary, ForwardBroadcastMatchesReference) {
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor a = rand_f64({3, 4}, 110, c.alo, c.ahi);
    Tensor b = rand_f64({4}, 111, c.blo, c.bhi);
    Tensor col = rand_f64({3, 1}, 112, c.alo, c.ahi);
    std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = col.to_vector<double>();
    std::vector<double> r1, r2;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        r1.push_back(c.ref(av[i * 4 + j], bv[j]));
        r2.push_back(c.ref(cv[i], bv[j]));
      }
    expect_close(c.op(a, b), r1, 1e-12, 1e-12);
    Tensor o2 = c.op(col, b);
    EXPECT_EQ(o2.shape(), (Shape{3, 4}));
    expect_close(o2, r2, 1e-12, 1e-12);
    // f32 inputs, and mixed f32/f64 promoting to f64.
    Tensor of = c.op(a.to(DType::f32), b.to(DType::f32));
    EXPECT_EQ(of.dtype(), DType::f32);
    expect_close(of, r1, 1e-4, 1e-5);
    EXPECT_EQ(c.op(a.to(DType::f32), b).dtype(), DType::f64);
  }
}

TEST(ElementwiseBinary, GradientsWithBroadcastingAndNonContiguous) {
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor a = rand_f64({3, 4}, 120, c.alo, c.ahi).set_requires_grad();
    Tensor b = rand_f64({4}, 121, c.blo, c.bhi).set_requires_grad();
    Tensor col = rand_f64({3, 1}, 122, c.alo, c.ahi).set_requires_grad();
    Tensor bt = rand_f64({4, 3}, 123, c.blo, c.bhi).set_requires_grad();
    auto op = c.op;
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0], in[1]); }, {a, b});
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0], in[1]); }, {col, b});
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0], in[1].t()); }, {a, bt});
    expect_gradients_match([op](const std::vector<Tensor>& in) { return op(in[0].slice(1, 0, 4, 2), in[1].slice(0, 1, 3)); },
                           {a, b});
  }
}

TEST(ElementwiseBinary, IntegerArithmeticAndScalarDtypes) {
  Tensor a = from_vector<int64_t>({1, -2, 3, 7}, {4});
  Tensor b = from_vector<int64_t>({2, 2, 0, 3}, {4});
  EXPECT_EQ(add(a, b).to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 3, 10}));
  EXPECT_EQ(mul(a, b).to_vector<int64_t>(), (std::vector<int64_t>{2, -4, 0, 21}));
  EXPECT_EQ(pow(a, b).to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 1, 343}));
  EXPECT_EQ(add(a, 2.0).dtype(), DType::i64);
  EXPECT_EQ(add(a, 0.5).dtype(), DType::f32);
  expect_close(add(a, 0.5), {1.5, -1.5, 3.5, 7.5});
  EXPECT_EQ(div(a, 2.0).dtype(), DType::f32);
  expect_close(div(a, 2.0), {0.5, -1, 1.5, 3.5});
  EXPECT_EQ(exp(a).dtype(), DType::f32);  // transcendental ops compute integers in float32
  expect_close(sqrt(from_vector<int64_t>({4, 9}, {2})), {2, 3});
  EXPECT_EQ(abs(a).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 7}));
  EXPECT_EQ(neg(a).to_vector<int64_t>(), (std::vector<int64_t>{-1, 2, -3, -7}));
}

TEST(ElementwiseSpecial, SignGeluValuesAndNaN) {
  expect_close(sign(from_vector<double>({-2, 0, 3}, {3})), {-1, 0, 1}, 0);
  expect_close(gelu(from_vector<double>({0, 1, -1}, {3})), {0, 0.8413447460685429, -0.15865525393145707}, 1e-12);
  const double nan = std::nan("");
  EXPECT_TRUE(std::isnan(clamp(from_vector<double>({nan}, {1}), 0.0, 1.0).item()));
  EXPECT_TRUE(std::isnan(maximum(from_vector<double>({nan}, {1}), from_vector<double>({1}, {1})).item()));
  // sigmoid stays finite at the extremes.
  expect_close(sigmoid(from_vector<float>({-100, 100}, {2})), {0, 1}, 1e-30);
}

TEST(ElementwiseCompare, TensorAndScalarComparisonsWithBroadcast) {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<double>({2, 2, 7}, {3});
  std::vector<double> av{1, 2, 3, 4, 5, 6}, bv{2, 2, 7};
  struct Cmp {
    const char* name;
    Tensor (*tt)(const Tensor&, const Tensor&);
    Tensor (*ts)(const Tensor&, double);
    std::function<bool(double, double)> ref;
  };
  std::vector<Cmp> cmps{{"eq", eq, eq, std::equal_to<double>()},    {"ne", ne, ne, std::not_equal_to<double>()},
                        {"lt", lt, lt, std::less<double>()},        {"le", le, le, std::less_equal<double>()},
                        {"gt", gt, gt, std::greater<double>()},     {"ge", ge, ge, std::greater_equal<double>()}};
  for (const auto& c : cmps) {
    SCOPED_TRACE(c.name);
    Tensor r = c.tt(a, b);
    EXPECT_EQ(r.dtype(), DType::boolean);
    EXPECT_EQ(r.shape(), (Shape{2, 3}));
    std::vector<double> e1, e2;
    for (int64_t i = 0; i < 6; ++i) {
      e1.push_back(c.ref(av[i], bv[i % 3]) ? 1 : 0);
      e2.push_back(c.ref(av[i], 3.0) ? 1 : 0);
    }
    expect_close(r, e1, 0);
    expect_close(c.ts(a, 3.0), e2, 0);
    expect_close(c.tt(a.t(), b.unsqueeze(1)).t(), e1, 0);  // non-contiguous operands
    EXPECT_FALSE(r.requires_grad());
  }
  // Integer tensor against a fractional scalar compares in floating point.
  expect_close(lt(from_vector<int64_t>({1, 2}, {2}), 1.5), {1, 0}, 0);
}

TEST(ElementwiseWhere, ForwardBroadcastAndGradients) {
  Tensor cond = gt(from_vector<double>({1, -1, 2, -2, 0.5, -3}, {2, 3}), 0.0);
  Tensor a = rand_f64({2, 3}, 130).set_requires_grad();
  Tensor b = rand_f64({3}, 131).set_requires_grad();
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<bool> cv{true, false, true, false, true, false};
  std::vector<double> ref;
  for (int64_t i = 0; i < 6; ++i) ref.push_back(cv[i] ? av[i] : bv[i % 3]);
  expect_close(where(cond, a, b), ref, 0);
  expect_gradients_match([cond](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});
  expect_gradients_match([cond](const std::vector<Tensor>& in) { return where(cond.t(), in[0].t(), in[1].unsqueeze(1)); },
                         {a, b});
  VOLT_EXPECT_ERROR(where(zeros({2, 3}), a, b), "where", "bool");
}

TEST(ElementwiseCast, RoundTripsAndGradient) {
  Tensor x = from_vector<double>({1.5, -2.25, 3.0}, {3});
  expect_close(cast(x, DType::f32), {1.5, -2.25, 3.0}, 0);
  EXPECT_EQ(cast(x, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  expect_close(cast(x, DType::f16), {1.5, -2.25, 3.0}, 0);
  Tensor g = rand_f64({3}, 140).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return cast(cast(in[0], DType::f32), DType::f64) * in[0]; },
                         {g}, 1e-3, 1e-3, 1e-3);  // wide steps: the f32 round trip quantises at ~1e-7
}

TEST(ElementwiseInplace, AddMulUpdates) {
  Tensor a = from_vector<float>({1, 2, 3}, {3});
  add_(a, from_vector<float>({1, 1, 1}, {3}), 2.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{3, 4, 5}));
  mul_(a, 2.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{6, 8, 10}));
  mul_(a, from_vector<float>({0.5f}, {1}));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{3, 4, 5}));
  Tensor p = zeros({3}).set_requires_grad();
  VOLT_EXPECT_ERROR(add_(p, ones({3})), "add_", "requires grad");
}

TEST(ElementwiseErrors, ShapeAndDeviceMessages) {
  VOLT_EXPECT_ERROR(mul(zeros({2, 3}), zeros({2})), "mul", "(2, 3)", "(2,)");
  VOLT_EXPECT_ERROR(clamp(zeros({2}), 1.0, 0.0), "clamp", "lo");
  VOLT_EXPECT_ERROR(add(Tensor(), zeros({2})), "add", "undefined");
}

TEST(ElementwiseFixes, IntegerDivisionIsTrueDivision) {
  Tensor q = div(from_vector<int64_t>({1, 3, -7}), from_vector<int64_t>({2, 2, 2}));
  EXPECT_EQ(q.dtype(), DType::f32);
  EXPECT_EQ(q.to_vector<float>(), (std::vector<float>{0.5f, 1.5f, -3.5f}));
}

TEST(ElementwiseFixes, MaximumAndMinimumSplitTiedGradients) {
  Tensor a = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor b = from_vector<double>({1, 5, 0}).set_requires_grad();
  maximum(a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.5, 0, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 1, 0}));
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  minimum(a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.5, 1, 0}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 0, 1}));
}

TEST(ElementwiseFixes, IntegerPowerWithNegativeExponent) {
  Tensor x = from_vector<int64_t>({-1, -1, 1, 2, 3});
  Tensor y = from_vector<int64_t>({-1, -2, -3, -1, 2});
  EXPECT_EQ(pow(x, y).to_vector<int64_t>(), (std::vector<int64_t>{-1, 1, 1, 0, 9}));
}

// A fresh bool buffer may hold bytes other than 0/1; fill_ (and so ones/full) must not load them as bool (the
// sanitized build reports such a load as undefined behaviour).
TEST(Elementwise, FillOfAFreshBoolTensorSetsEveryElement) {
  for (int rep = 0; rep < 3; ++rep) {
    Tensor t = ones({257}, DType::boolean);
    const bool* d = t.data<bool>();
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(d[i]) << i;
    Tensor z = full({5}, 0.0, DType::boolean);
    for (int64_t i = 0; i < z.numel(); ++i) ASSERT_FALSE(z.data<bool>()[i]) << i;
  }
}
