#pragma once
// Test helpers: compare analytic gradients with central finite differences (in float64), and compare
// tensors with a naive reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <volt/kernels/ops.h>

namespace volt::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// A float64 CPU leaf with values drawn from [lo, hi) by a fixed seed.
inline Tensor rand_f64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  return rand(shape, DType::f64, kCPU, &g, lo, hi);
}

// Checks d(sum(f(x) * w))/dx_i for every input that requires grad, against central differences.
// `w` is a fixed random weighting so that every output element's gradient path is exercised.
inline void expect_gradients_match(const TensorFn& f, std::vector<Tensor> inputs, double eps = 1e-6,
                                   double atol = 1e-6, double rtol = 1e-5) {
  for (auto& x : inputs)
    if (x.requires_grad()) x.set_grad(Tensor());
  Tensor out = f(inputs);
  ASSERT_TRUE(out.requires_grad()) << "the function's output does not require grad";
  Tensor w;
  {
    Generator g(1234);
    w = rand(out.shape(), DType::f64, kCPU, &g, 0.5, 1.5);
  }
  auto loss_of = [&](const std::vector<Tensor>& in) {
    NoGradGuard ng;
    return sum(mul(f(in).to(DType::f64), w)).item();
  };
  Tensor loss = sum(mul(out.to(DType::f64), w));
  loss.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    Tensor analytic = inputs[k].grad();
    ASSERT_TRUE(analytic.defined()) << "input " << k << " received no gradient";
    std::vector<double> a = analytic.to_vector<double>();
    // Perturb a contiguous f64 copy element by element.
    Tensor base = inputs[k].detach().contiguous().clone();
    double* p = base.data<double>();
    for (int64_t i = 0; i < base.numel(); ++i) {
      double orig = p[i];
      std::vector<Tensor> in = inputs;
      p[i] = orig + eps;
      in[k] = base.clone();
      double up = loss_of(in);
      p[i] = orig - eps;
      in[k] = base.clone();
      double down = loss_of(in);
      p[i] = orig;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(a[static_cast<size_t>(i)], numeric, atol + rtol * std::abs(numeric))
          << "input " << k << " element " << i;
    }
  }
}

// The same check for tensors that f() reads without taking them as arguments (a module's parameters): each must
// be a contiguous float64 leaf that requires grad; its elements are perturbed in place and restored.
inline void expect_param_gradients_match(const std::function<Tensor()>& f, const std::vector<Tensor>& params,
                                         double eps = 1e-6, double atol = 1e-6, double rtol = 1e-5) {
  for (Tensor p : params) p.set_grad(Tensor());
  Tensor out = f();
  ASSERT_TRUE(out.requires_grad()) << "the function's output does not require grad";
  Tensor w;
  {
    Generator g(4321);
    w = rand(out.shape(), DType::f64, kCPU, &g, 0.5, 1.5);
  }
  auto loss_of = [&] {
    NoGradGuard ng;
    return sum(mul(f().to(DType::f64), w)).item();
  };
  sum(mul(out.to(DType::f64), w)).backward();
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    ASSERT_TRUE(p.dtype() == DType::f64 && p.is_contiguous() && p.is_leaf()) << "parameter " << k;
    ASSERT_TRUE(p.grad().defined()) << "parameter " << k << " received no gradient";
    const std::vector<double> a = p.grad().to_vector<double>();
    double* d = p.data<double>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double orig = d[i];
      d[i] = orig + eps;
      const double up = loss_of();
      d[i] = orig - eps;
      const double down = loss_of();
      d[i] = orig;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(a[static_cast<size_t>(i)], numeric, atol + rtol * std::abs(numeric))
          << "parameter " << k << " element " << i;
    }
  }
}

inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol = 1e-5,
                         double rtol = 1e-5) {
  std::vector<double> a = actual.to_vector<double>();
  ASSERT_EQ(a.size(), expected.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], expected[i], atol + rtol * std::abs(expected[i])) << "element " << i;
}

// Expects `stmt` to throw volt::Error whose message contains every fragment.
#define VOLT_EXPECT_ERROR(stmt, ...)                                                       \
  do {                                                                                     \
    try {                                                                                  \
      stmt;                                                                                \
      ADD_FAILURE() << "expected volt::Error from " #stmt;                                  \
    } catch (const ::volt::Error& e) {                                                     \
      for (const char* frag : {__VA_ARGS__})                                               \
        EXPECT_NE(std::string(e.what()).find(frag), std::string::npos)                     \
            << "message '" << e.what() << "' lacks '" << frag << "'";                      \
    }                                                                                      \
  } while (0)

}  // namespace volt::testing
