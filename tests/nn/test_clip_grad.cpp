#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include "nn/nn.h"

using namespace volt;
using volt::testing::expect_close;

namespace {
std::vector<Tensor> params_with_grads() {
  Tensor a = zeros({2}).set_requires_grad(), b = zeros({1}, DType::f64).set_requires_grad();
  Tensor c = zeros({3}).set_requires_grad();  // no grad: ignored
  a.set_grad(from_vector<float>({3, -4}));
  b.set_grad(from_vector<double>({12}));
  return {a, b, c};
}
}  // namespace

TEST(ClipGrad, NormScalesWhenAboveMax) {
  auto ps = params_with_grads();
  double total = nn::clip_grad_norm_(ps, 6.5);
  EXPECT_NEAR(total, 13.0, 1e-12);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_close(ps[0].grad(), {3 * coef, -4 * coef}, 1e-6);
  expect_close(ps[1].grad(), {12 * coef}, 1e-12);
  EXPECT_FALSE(ps[2].grad().defined());
}

TEST(ClipGrad, NormLeavesSmallGradients) {
  auto ps = params_with_grads();
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0), 13.0, 1e-12);
  expect_close(ps[0].grad(), {3, -4});
  expect_close(ps[1].grad(), {12});
}

TEST(ClipGrad, OtherNorms) {
  auto ps = params_with_grads();
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0, 1.0), 19.0, 1e-12);
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0, 3.0), std::cbrt(27.0 + 64.0 + 1728.0), 1e-9);
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 6.0, INFINITY), 12.0, 1e-12);
  expect_close(ps[1].grad(), {12 * 6.0 / (12.0 + 1e-6)}, 1e-12);
  EXPECT_EQ(nn::clip_grad_norm_({zeros({1}).set_requires_grad()}, 1.0), 0.0);
  VOLT_EXPECT_ERROR(nn::clip_grad_norm_(ps, 1.0, -2.0), "norm_type");
}

TEST(ClipGrad, Value) {
  auto ps = params_with_grads();
  nn::clip_grad_value_(ps, 3.5);
  expect_close(ps[0].grad(), {3, -3.5});
  expect_close(ps[1].grad(), {3.5});
  VOLT_EXPECT_ERROR(nn::clip_grad_value_(ps, -1.0), "clip_value");
}
