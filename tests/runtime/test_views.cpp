// Views share storage with their base, have the right geometry and values, and backpropagate correctly.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>

using namespace volt;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {
Tensor iota(const Shape& shape) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, DType::f32).view(shape);
}
// A write through `view` must be visible in `base` (same storage, no copy).
void expect_shares_storage(const Tensor& base, const Tensor& view) {
  EXPECT_EQ(base.storage().get(), view.storage().get());
}
}  // namespace

TEST(Views, ViewWithInferredDimSharesStorage) {
  Tensor a = iota({2, 6});
  Tensor v = a.view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 4}));
  EXPECT_EQ(v.strides(), (Shape{4, 1}));
  expect_shares_storage(a, v);
  {
    NoGradGuard ng;
    v.select(0, 2).fill_(-1.0);  // elements 8..11 of a
  }
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1}));
}

TEST(Views, ViewErrors) {
  Tensor a = iota({2, 6});
  VOLT_EXPECT_ERROR(a.view({5, -1}), "view", "(5, -1)", "(2, 6)");
  VOLT_EXPECT_ERROR(a.view({-1, -1}), "view", "only one dimension can be -1");
  VOLT_EXPECT_ERROR(a.t().view({12}), "view", "without a copy", "reshape");
}

TEST(Views, ReshapeCopiesOnlyWhenItMust) {
  Tensor a = iota({2, 3});
  Tensor r = a.reshape({3, 2});
  expect_shares_storage(a, r);
  Tensor t = a.t();  // [[0,3],[1,4],[2,5]]
  Tensor rt = t.reshape({-1});
  EXPECT_NE(rt.storage().get(), a.storage().get());
  EXPECT_EQ(rt.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Views, TransposeAndPermuteSwapStrides) {
  Tensor a = iota({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  expect_shares_storage(a, p);
  // p[k][i][j] = a[i][j][k] = 12i + 4j + k
  EXPECT_EQ(p.select(0, 3).to_vector<float>(), (std::vector<float>{3, 7, 11, 15, 19, 23}));
  Tensor t = a.transpose(-1, 0);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  VOLT_EXPECT_ERROR(a.permute({0, 0, 1}), "permute", "twice");
  VOLT_EXPECT_ERROR(a.permute({0, 1}), "permute", "2 dims", "3 dimensions");
}

TEST(Views, SliceWithNegativeBoundsAndSteps) {
  Tensor a = iota({10});
  Tensor s = a.slice(0, -7, -1, 2);  // elements 3, 5, 7
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.strides(), (Shape{2}));
  EXPECT_EQ(s.offset(), 3);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 5, 7}));
  expect_shares_storage(a, s);
  EXPECT_EQ(a.slice(0, 8, 100).to_vector<float>(), (std::vector<float>{8, 9}));  // end clamps
  EXPECT_EQ(a.slice(0, 5, 2).numel(), 0);                                      // empty, not an error
  Tensor m = iota({3, 4}).slice(1, 1, 4, 2);                                   // columns 1 and 3
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  VOLT_EXPECT_ERROR(a.slice(0, 0, 5, 0), "slice", "step");
}

TEST(Views, NarrowAndSelect) {
  Tensor a = iota({3, 4});
  Tensor n = a.narrow(1, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{3, 2}));
  EXPECT_EQ(n.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  Tensor s = a.select(0, -1);
  EXPECT_EQ(s.shape(), (Shape{4}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  expect_shares_storage(a, s);
  VOLT_EXPECT_ERROR(a.narrow(1, 3, 2), "narrow", "size 4");
  VOLT_EXPECT_ERROR(a.select(0, 3), "select", "index 3", "size 3");
}

TEST(Views, ExpandUsesStrideZero) {
  Tensor a = from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  expect_shares_storage(a, e);
  std::vector<float> v = e.to_vector<float>();
  ASSERT_EQ(v.size(), 24u);
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[5], 2);
  EXPECT_EQ(v[23], 3);
  EXPECT_EQ(a.expand({-1, 2}).shape(), (Shape{3, 2}));
  VOLT_EXPECT_ERROR(a.expand({4, 4}), "expand", "size 3", "4");
}

TEST(Views, SqueezeUnsqueezeFlatten) {
  Tensor a = iota({2, 1, 3, 1});
  EXPECT_EQ(a.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(a.squeeze(1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(a.squeeze(0).shape(), (Shape{2, 1, 3, 1}));  // size != 1: unchanged
  EXPECT_EQ(a.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(a.unsqueeze(0).shape(), (Shape{1, 2, 1, 3, 1}));
  Tensor b = iota({2, 3, 4});
  EXPECT_EQ(b.flatten().shape(), (Shape{24}));
  EXPECT_EQ(b.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(b.flatten(0, 1).shape(), (Shape{6, 4}));
  expect_shares_storage(b, b.flatten(1));
  EXPECT_EQ(scalar_tensor(5.0).flatten().shape(), (Shape{1}));
  VOLT_EXPECT_ERROR(b.flatten(2, 1), "flatten", "start_dim");
}

TEST(Views, ContiguousCopiesStridedAndReturnsSelfOtherwise) {
  Tensor a = iota({2, 3});
  EXPECT_TRUE(a.contiguous().is_same(a));
  Tensor c = a.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (Shape{2, 1}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_NE(c.storage().get(), a.storage().get());
}

// ---- gradients --------------------------------------------------------------------------------------------

TEST(ViewGradients, ViewReshapeFlatten) {
  Tensor a = rand_f64({2, 6}, 1).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].view({3, -1}).exp(); }, {a});
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].t().reshape({4, 3}) * 2.0; }, {a});
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].view({2, 3, 2}).flatten(1).tanh(); }, {a});
}

TEST(ViewGradients, TransposePermute) {
  Tensor a = rand_f64({2, 3, 4}, 2).set_requires_grad();
  Tensor w = rand_f64({4, 2, 3}, 3);
  expect_gradients_match([w](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}) * w; }, {a});
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].transpose(0, 2).sigmoid(); }, {a});
}

TEST(ViewGradients, SliceNarrowSelect) {
  Tensor a = rand_f64({4, 6}, 4).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].slice(1, -5, -1, 2).exp(); }, {a});
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].narrow(0, 1, 2) * in[0].narrow(0, 2, 2); },
                         {a});
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].select(1, -2) + in[0].select(0, 3).slice(0, 0, 4); },
                         {a});
}

TEST(ViewGradients, ExpandSumsOverBroadcastDims) {
  Tensor a = rand_f64({3, 1}, 5).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].expand({2, 3, 4}).exp(); }, {a});
  // Exact: each element is repeated 2*4 = 8 times.
  Tensor b = from_vector<double>({1, 2, 3}, {3, 1}).set_requires_grad();
  b.expand({2, 3, 4}).sum().backward();
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{8, 8, 8}));
}

TEST(ViewGradients, SqueezeUnsqueezeContiguous) {
  Tensor a = rand_f64({2, 1, 3}, 6).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].squeeze().unsqueeze(0).transpose(1, 2).exp(); }, {a});
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0].transpose(0, 2).contiguous() * 3.0; }, {a});
}
