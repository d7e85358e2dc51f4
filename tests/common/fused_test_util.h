#pragma once
// Shared by the fused-op tests (tests/kernels/test_fused.cpp, tests/kernels/test_linear_cross_entropy.cpp): fresh
// leaves, elementwise comparisons, and class-index targets with ignored rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <volt/kernels/ops.h>

namespace volt::testing {

// A detached copy of t that requires grad.
inline Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.set_requires_grad(true);
  return c;
}

// |a - b| <= atol + rtol * |b| elementwise, the first failing element named.
inline void expect_all_near(const Tensor& a, const Tensor& b, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_NEAR(va[i], vb[i], atol + rtol * std::abs(vb[i])) << what << ", element " << i;
}

// n targets in [0, v) (row i: (7 i + seed) mod v); with_ignored puts the ignored class -1 in every fourth row from
// row 1.
inline Tensor targets(int64_t n, int64_t v, uint64_t seed, bool with_ignored) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = (with_ignored && i % 4 == 1) ? -1 : static_cast<int64_t>((i * 7 + seed) % v);
  return from_vector<int64_t>(t, {n});
}

}  // namespace volt::testing
