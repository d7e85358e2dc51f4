// The math ops of kernels/math_ops.h beyond what the op table checks: values against std:: references,
// softplus's linear branch, elu at 0, round's ties to even, linspace's endpoints, randint's range and
// reproducibility, second derivatives against closed forms, autocast, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "common/error_message.h"
#include "common/gradcheck.h"
#include <volt/tensor.h>

using namespace volt;
using volt::testing::message_of;
using volt::testing::rand_f64;

namespace {

using Fn = std::function<Tensor(const Tensor&)>;
using Ref = std::function<double(double)>;

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double softplus_ref(double x, double beta = 1, double threshold = 20) {
  return x * beta > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double elu_ref(double x, double alpha = 1) { return x > 0 ? x : alpha * std::expm1(x); }

void expect_values(const Tensor& t, const std::vector<double>& want, double tol, const std::string& what) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " [" << i << "]";
}

std::vector<double> map(const std::vector<double>& x, const Ref& f) {
  std::vector<double> y;
  for (double v : x) y.push_back(f(v));
  return y;
}

// ---- values against std:: -----------------------------------------------------------------------------------

struct Case {
  const char* name;
  Fn op;
  Ref ref, d1, d2;  // value, first and second derivative
  double lo, hi;
};

std::vector<Case> cases() {
  const double c = 2 / std::sqrt(M_PI);
  return {
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); },
       [](double x) { return std::cos(x); }, [](double x) { return -std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); },
       [](double x) { return -std::sin(x); }, [](double x) { return -std::cos(x); }, -4, 4},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); },
       [c](double x) { return c * std::exp(-x * x); }, [c](double x) { return -2 * x * c * std::exp(-x * x); }, -2,
       2},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); },
       [](double x) { return 1 / (1 + x); }, [](double x) { return -1 / ((1 + x) * (1 + x)); }, -0.5, 2},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); },
       [](double x) { return std::exp(x); }, [](double x) { return std::exp(x); }, -2, 2},
      {"softplus", [](const Tensor& x) { return softplus(x); }, [](double x) { return softplus_ref(x); },
       sigmoid_ref, [](double x) { return sigmoid_ref(x) * (1 - sigmoid_ref(x)); }, -4, 4},
      {"softplus_beta2", [](const Tensor& x) { return softplus(x, 2.0, 30.0); },
       [](double x) { return softplus_ref(x, 2, 30); }, [](double x) { return sigmoid_ref(2 * x); },
       [](double x) { return 2 * sigmoid_ref(2 * x) * (1 - sigmoid_ref(2 * x)); }, -3, 3},
      {"elu", [](const Tensor& x) { return elu(x, 0.7); }, [](double x) { return elu_ref(x, 0.7); },
       [](double x) { return x > 0 ? 1.0 : 0.7 * std::exp(x); },
       [](double x) { return x > 0 ? 0.0 : 0.7 * std::exp(x); },
       -3, 2},
      {"mish", [](const Tensor& x) { return mish(x); }, mish_ref,
       [](double x) {
         const double t = std::tanh(std::log1p(std::exp(x)));
         return t + x * sigmoid_ref(x) * (1 - t * t);
       },
       [](double x) {  // central differences of the closed-form first derivative
         auto d1 = [](double v) {
           const double t = std::tanh(std::log1p(std::exp(v)));
           return t + v * sigmoid_ref(v) * (1 - t * t);
         };
         const double h = 1e-5;
         return (d1(x + h) - d1(x - h)) / (2 * h);
       },
       -4, 4},
  };
}

TEST(MathOps, ValuesMatchStd) {
  for (const Case& k : cases()) {
    Tensor x = rand_f64({257}, 11, k.lo, k.hi);
    std::vector<double> xv = x.to_vector<double>();
    expect_values(k.op(x), map(xv, k.ref), 1e-14, std::string(k.name) + " f64");
    Tensor y = k.op(x.to(DType::f32));
    EXPECT_EQ(y.dtype(), DType::f32) << k.name;
    expect_values(y, map(x.to(DType::f32).to_vector<double>(), k.ref), 2e-6, std::string(k.name) + " f32");
  }
}

TEST(MathOps, FirstAndSecondDerivativesMatchClosedForms) {
  for (const Case& k : cases()) {
    Tensor x = rand_f64({64}, 12, k.lo, k.hi).set_requires_grad();
    std::vector<double> xv = x.to_vector<double>();
    Tensor y = k.op(x);
    autograd::GradOptions create;
    create.create_graph = true;
    Tensor g1 = autograd::grad(y, x, ones_like(y), create);
    ASSERT_TRUE(g1.requires_grad()) << k.name << ": the create_graph gradient carries no graph";
    expect_values(g1, map(xv, k.d1), 1e-12, std::string(k.name) + " first derivative (create_graph)");
    Tensor g2 = autograd::grad(g1, x, ones_like(g1));
    expect_values(g2, map(xv, k.d2), std::string(k.name) == "mish" ? 1e-8 : 1e-12,
                  std::string(k.name) + " second derivative");
    // The first-order (fast) path gives the same first derivative.
    Tensor x2 = x.detach().clone().set_requires_grad();
    k.op(x2).backward(ones_like(y.detach()));
    expect_values(x2.grad(), map(xv, k.d1), 1e-12, std::string(k.name) + " first derivative (backward)");
  }
}

TEST(MathOps, IntegerInputsBecomeFloat32) {
  Tensor i = from_vector<int64_t>({0, 1, 2}, {3});
  Tensor s = sin(i);
  EXPECT_EQ(s.dtype(), DType::f32);
  expect_values(s, {0.0, std::sin(1.0), std::sin(2.0)}, 1e-6, "sin of int64");
  EXPECT_EQ(softplus(i).dtype(), DType::f32);
  EXPECT_EQ(mish(i.to(DType::u8)).dtype(), DType::f32);
}

// ---- softplus's linear branch ------------------------------------------------------------------------------

TEST(MathOps, SoftplusThresholdBranch) {
  // beta x > threshold returns x itself (no overflow for large inputs), with gradient exactly 1.
  Tensor x = from_vector<float>({25.0f, 100.0f, 1000.0f, -100.0f}, {4}).set_requires_grad();
  Tensor y = softplus(x);
  std::vector<float> v = y.to_vector<float>();
  EXPECT_EQ(v[0], 25.0f);
  EXPECT_EQ(v[1], 100.0f);
  EXPECT_EQ(v[2], 1000.0f);
  EXPECT_GE(v[3], 0.0f);
  EXPECT_LT(v[3], 1e-40f);
  y.backward(ones_like(y.detach()));
  std::vector<float> gv = x.grad().to_vector<float>();
  EXPECT_EQ(gv[0], 1.0f);
  EXPECT_EQ(gv[1], 1.0f);
  EXPECT_EQ(gv[2], 1.0f);
  EXPECT_LT(gv[3], 1e-40f);
  // beta 2, threshold 3: the branch switches where 2x crosses 3 (the value jumps, as in PyTorch).
  Tensor z = from_vector<double>({1.4, 1.6}, {2}).set_requires_grad();
  Tensor w = softplus(z, 2.0, 3.0);
  expect_values(w, {std::log1p(std::exp(2.8)) / 2, 1.6}, 1e-15, "softplus(beta 2, threshold 3)");
  w.backward(ones_like(w.detach()));
  expect_values(z.grad(), {sigmoid_ref(2.8), 1.0}, 1e-15, "softplus gradient");
  // The same under create_graph, and the linear branch's second derivative is zero.
  Tensor z2 = z.detach().clone().set_requires_grad();
  autograd::GradOptions create;
  create.create_graph = true;
  Tensor w2 = softplus(z2, 2.0, 3.0);
  Tensor g1 = autograd::grad(w2, z2, ones_like(w2.detach()), create);
  expect_values(g1, {sigmoid_ref(2.8), 1.0}, 1e-15, "softplus gradient (create_graph)");
  Tensor g2 = autograd::grad(g1, z2, ones_like(g1.detach()));
  expect_values(g2, {2 * sigmoid_ref(2.8) * (1 - sigmoid_ref(2.8)), 0.0}, 1e-14, "softplus second derivative");
}

TEST(MathOps, SoftplusHalfInputsRunInFloat) {
  // f16 input beyond exp's f16 range: computed in f32, so no overflow before the threshold test.
  Tensor x = from_vector<float>({15.0f, -15.0f, 0.0f}, {3}).to(DType::f16);
  Tensor y = softplus(x);
  EXPECT_EQ(y.dtype(), DType::f16);
  expect_values(y, {softplus_ref(15.0), softplus_ref(-15.0), std::log(2.0)}, 1e-3, "softplus f16");
}

// ---- elu at 0 ------------------------------------------------------------------------------------------------

TEST(MathOps, EluAtZero) {
  // Value 0, gradient alpha (the x <= 0 branch, as PyTorch), on both backward paths.
  for (double alpha : {1.0, 0.5, 2.0}) {
    Tensor x = zeros({1}, DType::f64).set_requires_grad();
    Tensor y = elu(x, alpha);
    EXPECT_EQ(y.item(), 0.0);
    y.backward(ones_like(y.detach()));
    EXPECT_EQ(x.grad().item(), alpha);
    Tensor x2 = zeros({1}, DType::f64).set_requires_grad();
    autograd::GradOptions create;
    create.create_graph = true;
    Tensor y2 = elu(x2, alpha);
    Tensor g1 = autograd::grad(y2, x2, ones_like(y2.detach()), create);
    EXPECT_EQ(g1.item(), alpha);
    EXPECT_EQ(autograd::grad(g1, x2, ones_like(g1.detach())).item(), alpha);  // alpha exp(0)
  }
  // Negative inputs saturate at -alpha.
  expect_values(elu(from_vector<double>({-50.0, 3.0}, {2}), 0.5), {-0.5, 3.0}, 1e-15, "elu saturation");
}

// ---- floor and round ------------------------------------------------------------------------------------------

TEST(MathOps, RoundHalfToEven) {
  const std::vector<double> x{-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999999999999994, -0.7, 2.6};
  const std::vector<double> want{-4, -2, -2, -0, 0, 2, 2, 4, 0, -1, 3};
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    std::vector<double> xs = x;
    if (dt != DType::f64) xs[8] = 0.25;  // the largest double below 0.5 is not in the narrower types
    std::vector<double> w = want;
    Tensor r = round(from_vector<double>(xs, {static_cast<int64_t>(xs.size())}).to(dt));
    EXPECT_EQ(r.dtype(), dt);
    std::vector<double> got = r.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], w[i]) << dtype_name(dt) << " round(" << xs[i] << ")";
  }
  // -0.5 rounds to -0.0, as std::nearbyint and torch.round do.
  EXPECT_TRUE(std::signbit(round(from_vector<double>({-0.5}, {1})).item()));
}

TEST(MathOps, FloorValues) {
  Tensor f = floor(from_vector<double>({-2.5, -0.0, -1e-300, 0.999, 3.0, -3.0}, {6}));
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{-3, -0.0, -1, 0, 3, -3}));
}

TEST(MathOps, FloorRoundGradientIsZeroAndComposes) {
  Tensor x = rand_f64({16}, 13, -3, 3).set_requires_grad();
  Tensor y = add(mul(x, round(x)), floor(x));
  y.backward(ones_like(y.detach()));
  // d/dx (x round(x) + floor(x)) = round(x)
  EXPECT_EQ(x.grad().to_vector<double>(), round(x.detach()).to_vector<double>());
  // Under create_graph the zero gradient merges with one that carries a graph: d2/dx2 (sin x + floor x) = -sin x.
  Tensor x2 = x.detach().clone().set_requires_grad();
  autograd::GradOptions create;
  create.create_graph = true;
  // (Two outputs, so the engine sums the paths: add's own backward is not recorded yet.)
  Tensor s = sin(x2), f = floor(x2);
  Tensor g1 = autograd::grad({s, f}, {x2}, {ones_like(s.detach()), ones_like(f.detach())}, create)[0];
  expect_values(g1, map(x.detach().to_vector<double>(), [](double v) { return std::cos(v); }), 1e-15, "d/dx");
  Tensor g2 = autograd::grad(g1, x2, ones_like(g1.detach()));
  expect_values(g2, map(x.detach().to_vector<double>(), [](double v) { return -std::sin(v); }), 1e-15, "d2/dx2");
}

TEST(MathOps, FloorRoundOfIntegersAndBool) {
  Tensor i = from_vector<int64_t>({-3, 0, 7}, {3});
  for (const Tensor& r : {floor(i), round(i)}) {
    EXPECT_EQ(r.dtype(), DType::i64);
    EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{-3, 0, 7}));
    EXPECT_NE(r.data_ptr(), i.data_ptr()) << "a copy, not the input itself";
  }
  Tensor b = from_vector<uint8_t>({1, 0}, {2}).to(DType::boolean);
  std::string m = message_of([&] { floor(b); });
  EXPECT_NE(m.find("floor: bool input is not supported"), std::string::npos) << m;
  m = message_of([&] { round(b); });
  EXPECT_NE(m.find("round: bool input"), std::string::npos) << m;
}

// ---- autocast ----------------------------------------------------------------------------------------------

TEST(MathOps, AutocastRules) {
  Tensor x = from_vector<float>({0.25f, 0.5f}, {2}).to(DType::bf16);
  AutocastGuard on(true, DType::bf16);
  EXPECT_EQ(log1p(x).dtype(), DType::f32);
  EXPECT_EQ(expm1(x).dtype(), DType::f32);
  EXPECT_EQ(softplus(x).dtype(), DType::f32);
  for (const Tensor& y : {sin(x), cos(x), erf(x), elu(x), mish(x), floor(x), round(x)})
    EXPECT_EQ(y.dtype(), DType::bf16);
  // Gradients return in the input's dtype.
  Tensor leaf = from_vector<float>({0.25f, 0.5f}, {2}).to(DType::f16).set_requires_grad();
  Tensor y = log1p(leaf);
  EXPECT_EQ(y.dtype(), DType::f32);
  y.backward(ones_like(y.detach()));
  EXPECT_EQ(leaf.grad().dtype(), DType::f16);
  expect_values(leaf.grad(), {1 / 1.25, 1 / 1.5}, 1e-3, "log1p gradient under autocast");
}

// ---- linspace ---------------------------------------------------------------------------------------------

TEST(MathOps, LinspaceValuesAndEndpoints) {
  EXPECT_EQ(linspace(0, 1, 5).to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1}));
  for (int64_t n : {2, 3, 10, 101, 1000}) {
    std::vector<double> v = linspace(-3.3, 7.7, n, DType::f64).to_vector<double>();
    ASSERT_EQ(static_cast<int64_t>(v.size()), n);
    EXPECT_EQ(v.front(), -3.3) << n;
    EXPECT_EQ(v.back(), 7.7) << n;
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(v[static_cast<size_t>(i)], -3.3 + 11.0 * static_cast<double>(i) / static_cast<double>(n - 1), 1e-14);
  }
  std::vector<float> f = linspace(0.1, 0.7, 13, DType::f32).to_vector<float>();
  EXPECT_EQ(f.front(), 0.1f);
  EXPECT_EQ(f.back(), 0.7f);
  EXPECT_EQ(linspace(5, 5, 3).to_vector<float>(), (std::vector<float>{5, 5, 5}));
  EXPECT_EQ(linspace(2, -2, 5).to_vector<float>(), (std::vector<float>{2, 1, 0, -1, -2}));
  EXPECT_EQ(linspace(2.5, 9, 1).to_vector<float>(), (std::vector<float>{2.5f}));
  Tensor e = linspace(0, 1, 0);
  EXPECT_EQ(e.shape(), (Shape{0}));
  // Integer dtypes truncate toward zero.
  EXPECT_EQ(linspace(-2, 2, 5, DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{-2, -1, 0, 1, 2}));
  EXPECT_EQ(linspace(0, 1, 3, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1}));
  EXPECT_FALSE(linspace(0, 1, 4).requires_grad());
}

TEST(MathOps, LinspaceErrors) {
  std::string m = message_of([] { linspace(0, 1, -1); });
  EXPECT_NE(m.find("linspace: steps must be non-negative, got -1"), std::string::npos) << m;
  m = message_of([] { linspace(0, 1, 3, DType::boolean); });
  EXPECT_NE(m.find("linspace: bool is not a valid dtype"), std::string::npos) << m;
  m = message_of([] { linspace(0, std::numeric_limits<double>::infinity(), 3); });
  EXPECT_NE(m.find("linspace: start and end must be finite"), std::string::npos) << m;
}

// ---- randint ------------------------------------------------------------------------------------------------

TEST(MathOps, RandintRangeAndCoverage) {
  Generator g(7);
  Tensor r = randint(-3, 4, {5000}, DType::i64, kCPU, &g);
  EXPECT_EQ(r.dtype(), DType::i64);
  std::vector<int64_t> v = r.to_vector<int64_t>();
  std::vector<int64_t> count(7, 0);
  for (int64_t x : v) {
    ASSERT_TRUE(x >= -3 && x < 4) << x;
    ++count[static_cast<size_t>(x + 3)];
  }
  for (int64_t c : count) EXPECT_NEAR(static_cast<double>(c), 5000.0 / 7, 120) << "every value about equally often";
  // One-value range, u8 and i32 dtypes, floating dtypes, the single-argument form.
  for (int64_t x : randint(9, 10, {50}, DType::i64, kCPU, &g).to_vector<int64_t>()) EXPECT_EQ(x, 9);
  for (uint8_t x : randint(250, 256, {50}, DType::u8, kCPU, &g).to_vector<uint8_t>()) EXPECT_GE(x, 250);
  for (int32_t x : randint(-5, 5, {50}, DType::i32, kCPU, &g).to_vector<int32_t>()) EXPECT_TRUE(x >= -5 && x < 5);
  for (double x : randint(0, 10, {50}, DType::bf16, kCPU, &g).to_vector<double>())
    EXPECT_TRUE(x >= 0 && x < 10 && x == std::floor(x)) << x;
  for (int64_t x : randint(3, {50}, DType::i64, kCPU, &g).to_vector<int64_t>()) EXPECT_TRUE(x >= 0 && x < 3);
  // The full int64 range: no overflow, both signs.
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> wide = randint(lo, hi, {200}, DType::i64, kCPU, &g).to_vector<int64_t>();
  int64_t negative = 0;
  for (int64_t x : wide) negative += x < 0;
  EXPECT_GT(negative, 60);
  EXPECT_LT(negative, 140);
}

TEST(MathOps, RandintIsReproducible) {
  // The same (seed, offset) gives the same numbers; the generator advances by ceil(n / 2) counters.
  Generator a(123), b(123);
  Tensor x = randint(0, 1000, {7}, DType::i64, kCPU, &a);
  EXPECT_EQ(a.offset(), 4u);
  EXPECT_EQ(x.to_vector<int64_t>(), randint(0, 1000, {7}, DType::i64, kCPU, &b).to_vector<int64_t>());
  EXPECT_EQ(x.to_vector<int64_t>(), randint_with_seed(0, 1000, {7}, 123, 0).to_vector<int64_t>());
  Tensor y = randint(0, 1000, {7}, DType::i64, kCPU, &a);
  EXPECT_EQ(y.to_vector<int64_t>(), randint_with_seed(0, 1000, {7}, 123, 4).to_vector<int64_t>());
  EXPECT_NE(x.to_vector<int64_t>(), y.to_vector<int64_t>());
  // Element i depends only on (seed, offset, i): a prefix of a longer draw, in every dtype.
  std::vector<int64_t> longer = randint_with_seed(-50, 50, {100}, 9, 3).to_vector<int64_t>();
  std::vector<int64_t> shorter = randint_with_seed(-50, 50, {13}, 9, 3).to_vector<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(longer.begin(), longer.begin() + 13), shorter);
  std::vector<double> as_f32 = randint_with_seed(-50, 50, {100}, 9, 3, DType::f32).to_vector<double>();
  for (size_t i = 0; i < longer.size(); ++i) EXPECT_EQ(as_f32[i], static_cast<double>(longer[i]));
  EXPECT_FALSE(x.requires_grad());
}

TEST(MathOps, RandintSameBitsOnGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  Tensor c = randint_with_seed(-1000, 1000, {4099}, 77, 5, DType::i64, kCPU);
  Tensor d = randint_with_seed(-1000, 1000, {4099}, 77, 5, DType::i64, cuda_device(0));
  EXPECT_EQ(c.to_vector<int64_t>(), d.cpu().to_vector<int64_t>());
  Tensor lc = linspace(-1.1, 3.7, 1001, DType::f64, kCPU), ld = linspace(-1.1, 3.7, 1001, DType::f64, cuda_device(0));
  EXPECT_EQ(lc.to_vector<double>(), ld.cpu().to_vector<double>());
}

TEST(MathOps, RandintErrors) {
  std::string m = message_of([] { randint(5, 5, {3}); });
  EXPECT_NE(m.find("randint: high (5) must be greater than low (5)"), std::string::npos) << m;
  m = message_of([] { randint(0, {3}); });
  EXPECT_NE(m.find("randint: high (0) must be greater than low (0)"), std::string::npos) << m;
  m = message_of([] { randint(0, 2, {3}, DType::boolean); });
  EXPECT_NE(m.find("randint: dtype bool is not supported"), std::string::npos) << m;
  m = message_of([] { randint(0, 300, {3}, DType::u8); });
  EXPECT_NE(m.find("randint: the range [0, 300) does not fit in dtype uint8 (values 0 to 255)"), std::string::npos)
      << m;
  m = message_of([] { randint(-1, 3, {3}, DType::u8); });
  EXPECT_NE(m.find("does not fit in dtype uint8"), std::string::npos) << m;
  m = message_of([] { randint(0, int64_t{1} << 40, {3}, DType::i32); });
  EXPECT_NE(m.find("does not fit in dtype int32"), std::string::npos) << m;
  m = message_of([] { randint(0, 300, {3}, DType::bf16); });
  EXPECT_NE(m.find("randint: the range [0, 300) does not fit in dtype bfloat16 (values -256 to 256)"),
            std::string::npos) << m;
  for (double x : randint(-256, 257, {64}, DType::bf16).to_vector<double>()) EXPECT_TRUE(x >= -256 && x <= 256);
}

// ---- other errors ----------------------------------------------------------------------------------------------

TEST(MathOps, ArgumentErrors) {
  Tensor x = ones({2});
  std::string m = message_of([&] { softplus(x, 0.0); });
  EXPECT_NE(m.find("softplus: beta must be nonzero and finite, got 0"), std::string::npos) << m;
  m = message_of([&] { softplus(x, 1.0, std::nan("")); });
  EXPECT_NE(m.find("softplus: threshold must not be NaN"), std::string::npos) << m;
  m = message_of([&] { elu(x, std::numeric_limits<double>::infinity()); });
  EXPECT_NE(m.find("elu: alpha must be finite"), std::string::npos) << m;
  m = message_of([] { sin(Tensor()); });
  EXPECT_NE(m.find("sin: the input is undefined"), std::string::npos) << m;
  m = message_of([] { floor(Tensor()); });
  EXPECT_NE(m.find("floor: the input is undefined"), std::string::npos) << m;
}

}  // namespace
