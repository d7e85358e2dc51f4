#pragma once
// Helpers of the optimizer tests (test_optim.cpp, test_optimizers_extra.cpp): fixed parameter values and
// per-step gradients as f64 vectors, f64 leaves made from them, and an element-wise relative comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <volt/kernels/ops.h>

namespace volt::optim_test {

using Vec = std::vector<double>;

// The gradient of step k: a fixed smooth pattern, different each step.
inline Vec grad_at(size_t n, int k) {
  Vec g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.7 * static_cast<double>(i) + 1.3 * k) * (1.0 + 0.1 * k);
  return g;
}

inline Vec init_values(size_t n, double shift = 0.0) {
  Vec p(n);
  for (size_t i = 0; i < n; ++i) p[i] = std::cos(0.3 * static_cast<double>(i)) + shift;
  return p;
}

// A 1-D leaf requiring grad, in `dt`.
inline Tensor param(const Vec& v, DType dt = DType::f64) {
  return from_vector<double>(v, {static_cast<int64_t>(v.size())}).to(dt).set_requires_grad();
}

inline void set_grad(Tensor& p, const Vec& g) { p.set_grad(from_vector<double>(g, p.shape()).to(p.dtype())); }

// |t[i] - ref[i]| <= tol * (1 + |ref[i]|) for every element.
inline void expect_vec_near(const Tensor& t, const Vec& ref, double tol) {
  const Vec got = t.to_vector<double>();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], tol * (1.0 + std::abs(ref[i]))) << "element " << i;
}

}  // namespace volt::optim_test
