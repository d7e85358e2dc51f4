// Reductions: sum, mean, var, max/min (over a dim and over all), argmax/argmin, against naive loops and
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/gradcheck.h"

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {

// Naive reference over one dim of a contiguous row-major tensor: returns (outer*inner) results of f(values).
template <class F>
std::vector<double> reduce_dim_ref(const std::vector<double>& x, const Shape& shape, int64_t dim, F f) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t r = shape[dim];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<double> v;
      for (int64_t k = 0; k < r; ++k) v.push_back(x[(o * r + k) * inner + i]);
      out.push_back(f(v));
    }
  return out;
}

double vmax(const std::vector<double>& v) { double m = v[0]; for (double x : v) m = std::max(m, x); return m; }
double vmin(const std::vector<double>& v) { double m = v[0]; for (double x : v) m = std::min(m, x); return m; }
double vargmax(const std::vector<double>& v) {
  size_t b = 0;
  for (size_t i = 1; i < v.size(); ++i) if (v[i] > v[b]) b = i;
  return static_cast<double>(b);
}
double vargmin(const std::vector<double>& v) {
  size_t b = 0;
  for (size_t i = 1; i < v.size(); ++i) if (v[i] < v[b]) b = i;
  return static_cast<double>(b);
}
double vsum(const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s; }
double vvar(const std::vector<double>& v, int64_t correction) {
  double m = vsum(v) / v.size(), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (static_cast<double>(v.size()) - correction);
}

}  // namespace

TEST(Reduce, SumAndMeanEveryDimMatchReference) {
  Shape shape{3, 4, 5};
  Tensor x = rand_f64(shape, 1);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t d = 0; d < 3; ++d) {
    expect_close(sum(x, {d}), reduce_dim_ref(xv, shape, d, vsum), 1e-12);
    expect_close(mean(x, {d}), reduce_dim_ref(xv, shape, d, [](auto& v) { return vsum(v) / v.size(); }), 1e-12);
  }
  EXPECT_NEAR(sum(x).item(), vsum(xv), 1e-12);
  Tensor s = sum(x, {0, 2}, true);
  EXPECT_EQ(s.shape(), (Shape{1, 4, 1}));
  // sum over dims {0, 2}: reduce dim 2 first then dim 0 in the reference.
  std::vector<double> r2 = reduce_dim_ref(xv, shape, 2, vsum);
  expect_close(s, reduce_dim_ref(r2, {3, 4}, 0, vsum), 1e-12);
}

TEST(Reduce, SumOverBatchDimOfFloatMatrix) {
  // The bias-gradient case: (B, 128) summed over dim 0, float32.
  Generator g(3);
  Tensor x = rand({16, 128}, DType::f32, kCPU, &g);
  std::vector<double> xv = x.to_vector<double>();
  expect_close(sum(x, {0}), reduce_dim_ref(xv, {16, 128}, 0, vsum), 1e-5);
}

TEST(Reduce, SumIntegerAndBoolPromoteToInt64) {
  Tensor b = gt(from_vector<float>({1, 0, 2, 3}, {4}), 0.5);
  Tensor s = sum(b);
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.item<int64_t>(), 3);
}

TEST(Reduce, VarMatchesReference) {
  Shape shape{4, 6};
  Tensor x = rand_f64(shape, 2);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t corr : {0, 1}) {
    expect_close(var(x, {1}, corr), reduce_dim_ref(xv, shape, 1, [&](auto& v) { return vvar(v, corr); }), 1e-12);
    expect_close(var(x, {0}, corr), reduce_dim_ref(xv, shape, 0, [&](auto& v) { return vvar(v, corr); }), 1e-12);
    EXPECT_NEAR(var(x, {}, corr).item(), vvar(xv, corr), 1e-12);
  }
  EXPECT_EQ(var(x, {1}, 1, true).shape(), (Shape{4, 1}));
}

TEST(Reduce, MaxMinOverDimValuesAndIndices) {
  Shape shape{3, 5, 4};
  Tensor x = rand_f64(shape, 4);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t d = 0; d < 3; ++d) {
    auto [mv, mi] = max(x, d);
    auto [nv, ni] = min(x, d);
    EXPECT_EQ(mi.dtype(), DType::i64);
    expect_close(mv, reduce_dim_ref(xv, shape, d, vmax), 0);
    expect_close(mi, reduce_dim_ref(xv, shape, d, vargmax), 0);
    expect_close(nv, reduce_dim_ref(xv, shape, d, vmin), 0);
    expect_close(ni, reduce_dim_ref(xv, shape, d, vargmin), 0);
    expect_close(argmax(x, d), reduce_dim_ref(xv, shape, d, vargmax), 0);
    expect_close(argmin(x, d), reduce_dim_ref(xv, shape, d, vargmin), 0);
  }
  auto [kv, ki] = max(x, -1, true);
  EXPECT_EQ(kv.shape(), (Shape{3, 5, 1}));
  EXPECT_EQ(ki.shape(), (Shape{3, 5, 1}));
  EXPECT_EQ(argmax(x, 1, true).shape(), (Shape{3, 1, 4}));
  EXPECT_DOUBLE_EQ(max(x).item(), vmax(xv));
  EXPECT_DOUBLE_EQ(min(x).item(), vmin(xv));
}

TEST(Reduce, ArgmaxFloatRowsAndTiesPickFirst) {
  Tensor x = from_vector<float>({1, 3, 3, 0, 5, 5, 5, 2, -1, -2, -3, -1}, {3, 4});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  Tensor ints = from_vector<int64_t>({4, 9, 9, 1}, {4});
  EXPECT_EQ(argmax(ints, 0).item<int64_t>(), 1);
  EXPECT_EQ(max(ints).item<int64_t>(), 9);
}

TEST(Reduce, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({1, nan, 3, 2}, {4});
  EXPECT_TRUE(std::isnan(max(x).item()));
  EXPECT_EQ(argmax(x, 0).item<int64_t>(), 1);
  EXPECT_TRUE(std::isnan(min(x).item()));
}

TEST(Reduce, NonContiguousInputs) {
  Tensor base = rand_f64({5, 6}, 5);
  Tensor xt = base.t();  // (6, 5), non-contiguous
  Tensor ref = xt.contiguous();
  std::vector<double> rv = ref.to_vector<double>();
  expect_close(max(xt, 1).first, reduce_dim_ref(rv, {6, 5}, 1, vmax), 0);
  expect_close(argmin(xt, 0), reduce_dim_ref(rv, {6, 5}, 0, vargmin), 0);
  expect_close(sum(xt, {1}), reduce_dim_ref(rv, {6, 5}, 1, vsum), 1e-12);
  expect_close(var(xt, {0}), reduce_dim_ref(rv, {6, 5}, 0, [](auto& v) { return vvar(v, 1); }), 1e-12);
}

TEST(ReduceGrad, SumMeanVar) {
  Tensor x = rand_f64({3, 4}, 6).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return sum(in[0], {1}); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& in) { return mean(in[0], {0}, true); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& in) { return var(in[0], {1}); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& in) { return var(in[0], {}, 0); }, {x});
}

TEST(ReduceGrad, MaxMinOverDimAndAll) {
  Tensor x = rand_f64({3, 4, 2}, 7).set_requires_grad();
  for (int64_t d = 0; d < 3; ++d) {
    expect_gradients_match([d](const std::vector<Tensor>& in) { return max(in[0], d).first; }, {x});
    expect_gradients_match([d](const std::vector<Tensor>& in) { return min(in[0], d, true).first; }, {x});
  }
  expect_gradients_match([](const std::vector<Tensor>& in) { return max(in[0]); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& in) { return min(in[0]); }, {x});
}

TEST(ReduceGrad, NonContiguousAndBroadcastInputs) {
  Tensor x = rand_f64({4, 3}, 8).set_requires_grad();
  Tensor b = rand_f64({3}, 9).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return max(in[0].t(), 1).first; }, {x});
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return var(add(in[0].slice(0, 0, 4, 2), in[1]), {0}); }, {x, b});
  expect_gradients_match([](const std::vector<Tensor>& in) { return sum(mul(in[0], in[1]), {0}); }, {x, b});
}

TEST(ReduceGrad, MaxTieGoesToFirstIndex) {
  Tensor x = from_vector<double>({2, 5, 5, 1}, {1, 4}).set_requires_grad();
  max(x, 1).first.sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0}));
  Tensor y = from_vector<double>({2, 5, 5, 1}, {4}).set_requires_grad();
  max(y).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

TEST(ReduceErrors, BadDimsAndEmpty) {
  Tensor x = zeros({2, 3});
  VOLT_EXPECT_ERROR(max(x, 2), "max");
  VOLT_EXPECT_ERROR(argmax(x, -3), "argmax");
  VOLT_EXPECT_ERROR(sum(x, {0, 0}), "sum", "more than once");
  VOLT_EXPECT_ERROR(max(zeros({0, 3})), "max", "empty");
  VOLT_EXPECT_ERROR(max(zeros({0, 3}), 0), "max", "size 0");
  VOLT_EXPECT_ERROR(var(zeros({3}, DType::i64)), "var", "floating");
  VOLT_EXPECT_ERROR(mean(zeros({3}, DType::i64)), "mean", "floating");
}
