#include <gtest/gtest.h>

#include <volt/kernels/ops.h>

using namespace volt;

TEST(Tensor, FromVectorShapeAndValues) {
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Autograd, MulAddBroadcastGradient) {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  Tensor b = from_vector<double>({10, 20, 30}, {3}).set_requires_grad();
  Tensor loss = (a * b + a).sum();
  loss.backward();
  EXPECT_DOUBLE_EQ(loss.item(), 1 * 10 + 2 * 20 + 3 * 30 + 4 * 10 + 5 * 20 + 6 * 30 + 21);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{11, 21, 31, 11, 21, 31}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
}

#include "common/gradcheck.h"

TEST(Gradcheck, HarnessOnElementwiseChain) {
  Tensor a = volt::testing::rand_f64({3, 4}, 1).set_requires_grad();
  Tensor b = volt::testing::rand_f64({4}, 2, 0.5, 2.0).set_requires_grad();
  volt::testing::expect_gradients_match(
      [](const std::vector<Tensor>& in) { return (in[0] * in[1]).tanh() / in[1] + in[0].exp().sigmoid(); }, {a, b});
}

TEST(Errors, BroadcastMismatchNamesOpAndShapes) {
  VOLT_EXPECT_ERROR(add(zeros({2, 3}), zeros({4})), "add", "(2, 3)", "(4,)");
}

TEST(Tensor, ShapesTooLargeForInt64AreErrors) {
  VOLT_EXPECT_ERROR(empty({int64_t{1} << 32, int64_t{1} << 32}), "too large");
  VOLT_EXPECT_ERROR(empty({int64_t{1} << 61}, DType::f64), "too large");
  VOLT_EXPECT_ERROR(empty({int64_t{1} << 40, int64_t{1} << 40, 0}), "too large");  // strides would overflow
  VOLT_EXPECT_ERROR(shape_numel({int64_t{1} << 32, int64_t{1} << 32}), "more than 2^63 elements");
  EXPECT_EQ(shape_numel({int64_t{1} << 40, int64_t{1} << 40, 0}), 0);
  EXPECT_EQ(empty({0, 3}).numel(), 0);
}
