// The ops of kernels/tensor_ops.h: values against hand-computed results (ties in sort/topk, duplicate indices in
// index_add/scatter_add, every einsum form), gradients against finite differences, and error messages.
// (Every device and dtype: tests/kernels/op_table/op_table_rows_tensor.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error_message.h"
#include "common/gradcheck.h"
#include "common/second_order.h"
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/tensor_ops.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_gradients_match;
using volt::testing::message_of;
using volt::testing::rand_f64;

namespace {

std::vector<double> vals(const Tensor& t) { return t.detach().contiguous().to_vector<double>(); }
std::vector<int64_t> ints(const Tensor& t) { return t.contiguous().to_vector<int64_t>(); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---- sort / topk ----------------------------------------------------------------------------------------------

TEST(Sort, TiesKeepTheirOrderBothWays) {
  Tensor x = from_vector<double>({2, 1, 2, 0, 1, 2}, {6});
  auto [v, i] = sort(x);
  EXPECT_EQ(vals(v), (std::vector<double>{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(ints(i), (std::vector<int64_t>{3, 1, 4, 0, 2, 5}));
  auto [vd, id] = sort(x, 0, /*descending=*/true);
  EXPECT_EQ(vals(vd), (std::vector<double>{2, 2, 2, 1, 1, 0}));
  EXPECT_EQ(ints(id), (std::vector<int64_t>{0, 2, 5, 1, 4, 3}));
}

TEST(Sort, NaNIsLargestAndAlongAMiddleDim) {
  Tensor x = from_vector<float>({1, NAN, -1, 3}, {4});
  auto [v, i] = sort(x);
  EXPECT_EQ(ints(i), (std::vector<int64_t>{2, 0, 3, 1}));
  EXPECT_TRUE(std::isnan(vals(v)[3]));
  auto [vd, id] = sort(x, 0, true);
  EXPECT_EQ(ints(id), (std::vector<int64_t>{1, 3, 0, 2}));
  // (2, 3, 2) sorted along dim 1.
  Tensor y = from_vector<int64_t>({5, 0, 3, 1, 4, 2, 9, 6, 7, 8, 6, 6}, {2, 3, 2});
  auto [vy, iy] = sort(y, 1);
  EXPECT_EQ(ints(vy), (std::vector<int64_t>{3, 0, 4, 1, 5, 2, 6, 6, 7, 6, 9, 8}));
  EXPECT_EQ(ints(iy), (std::vector<int64_t>{1, 0, 2, 1, 0, 2, 2, 0, 1, 2, 0, 1}));
}

TEST(Sort, GradientFollowsThePermutation) {
  Tensor x = from_vector<double>({0.3, -0.2, 0.9, 0.1, 0.5, -0.7, 0.4, 0.8}, {2, 4}).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return sort(in[0], 1, true).first; }, {x});
  expect_gradients_match([](const std::vector<Tensor>& in) { return sort(in[0].t(), 1).first; }, {x});
}

TEST(Topk, TiesTakeTheLowerIndexFirst) {
  Tensor x = from_vector<double>({1, 3, 3, 2, 3}, {5});
  auto [v, i] = topk(x, 2);
  EXPECT_EQ(vals(v), (std::vector<double>{3, 3}));
  EXPECT_EQ(ints(i), (std::vector<int64_t>{1, 2}));
  auto [vs, is] = topk(x, 3, 0, /*largest=*/false);
  EXPECT_EQ(vals(vs), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(ints(is), (std::vector<int64_t>{0, 3, 1}));
  auto [v0, i0] = topk(x, 0);
  EXPECT_EQ(v0.shape(), (Shape{0}));
}

TEST(Topk, GradientAndErrors) {
  Tensor x = rand_f64({3, 5}, 7).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return topk(in[0], 2, 1).first; }, {x});
  const std::string m = message_of([&] { topk(x, 6, 1); });
  EXPECT_TRUE(contains(m, "topk: k = 6 is out of range for dim 1 of size 5")) << m;
}

// ---- cumsum / cumprod -----------------------------------------------------------------------------------------

TEST(Cumsum, ValuesDimsAndIntegerPromotion) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(vals(cumsum(x, 1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(vals(cumsum(x, 0)), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(vals(cumsum(x.t(), 1)), (std::vector<double>{1, 5, 2, 7, 3, 9}));
  Tensor b = from_vector<uint8_t>({1, 0, 1, 1}, {4}).to(DType::boolean);
  Tensor cb = cumsum(b, 0);
  EXPECT_EQ(cb.dtype(), DType::i64);
  EXPECT_EQ(ints(cb), (std::vector<int64_t>{1, 1, 2, 3}));
  Tensor g = rand_f64({3, 4}, 3).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return cumsum(in[0], -1); }, {g});
}

TEST(Cumprod, ValuesAndExactGradientsAtZeros) {
  Tensor x = from_vector<double>({2, 3, 0, 4, 0.5, 0, 2, 0}, {2, 4});
  EXPECT_EQ(vals(cumprod(x, 1)), (std::vector<double>{2, 6, 0, 0, 0.5, 0, 0, 0}));
  Tensor xg = x.clone().set_requires_grad();
  Tensor out = cumprod(xg, 1);
  out.backward(ones_like(out));
  // Row 0: d/dx of 2 + 6 + 0 + 0 with x = (2, 3, 0, 4): (1 + 3, 2, 2*3*(1 + 4), 0).
  // Row 1: x = (0.5, 0, 2, 0): (1, 0.5 * (1 + 2), 0, 0).
  EXPECT_EQ(vals(xg.grad()), (std::vector<double>{4, 2, 30, 0, 1, 1.5, 0, 0}));
  Tensor r = from_vector<double>({0.5, -1.5, 0, 2, 0, 1.25, 0.75, -0.5, 1.5}, {3, 3}).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return cumprod(in[0], 0); }, {r});
}

TEST(Cumprod, CreateGraphGradientEqualsTheKernels) {
  Tensor x = from_vector<double>({0.5, -1.5, 0, 2, 0, 1.25, 0.75, -0.5, 1.5, 1.1, 0.9, 0}, {3, 4});
  Tensor w = rand_f64({3, 4}, 11);
  Tensor a = x.clone().set_requires_grad();
  Tensor first = autograd::grad(cumprod(a, 1), a, w);
  Tensor b = x.clone().set_requires_grad();
  autograd::GradOptions o;
  o.create_graph = true;
  Tensor second_path = autograd::grad(cumprod(b, 1), b, w, o);
  std::vector<double> e = vals(first), g = vals(second_path);
  for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-12) << i;
}

// ---- masked_fill / tril / triu --------------------------------------------------------------------------------

TEST(MaskedFill, ValuesBroadcastAndErrors) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor m = from_vector<uint8_t>({1, 0, 1}, {3}).to(DType::boolean);
  EXPECT_EQ(vals(masked_fill(x, m, -1)), (std::vector<double>{-1, 2, -1, -1, 5, -1}));
  const std::string e1 = message_of([&] { masked_fill(x, from_vector<int64_t>({1, 0, 1}), 0); });
  EXPECT_TRUE(contains(e1, "masked_fill: argument 'mask' has dtype int64; expected bool")) << e1;
  const std::string e2 = message_of([&] { masked_fill(x, zeros({2, 2, 3}, DType::boolean), 0); });
  EXPECT_TRUE(contains(e2, "does not broadcast to the input's shape")) << e2;
  Tensor xg = rand_f64({2, 3}, 5).set_requires_grad();
  expect_gradients_match([m](const std::vector<Tensor>& in) { return masked_fill(in[0], m, 3.0); }, {xg});
}

TEST(Triangle, TrilTriuWithOffsets) {
  Tensor x = arange(1.0, 10.0, 1.0, DType::f64).reshape({3, 3});
  EXPECT_EQ(vals(tril(x)), (std::vector<double>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(vals(tril(x, -1)), (std::vector<double>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_EQ(vals(triu(x, 1)), (std::vector<double>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  Tensor r = arange(1.0, 7.0, 1.0, DType::f64).reshape({2, 3});
  EXPECT_EQ(vals(triu(r)), (std::vector<double>{1, 2, 3, 0, 5, 6}));
  const std::string m = message_of([] { tril(zeros({3})); });
  EXPECT_TRUE(contains(m, "tril: argument 'input' has shape (3,); expected at least 2 dims")) << m;
}

// ---- scatter_add / index_add ----------------------------------------------------------------------------------

TEST(IndexAdd, DuplicatesAccumulate) {
  Tensor x = zeros({4, 2}, DType::f64);
  Tensor idx = from_vector<int64_t>({0, 2, 0, 0});
  Tensor src = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  EXPECT_EQ(vals(index_add(x, 0, idx, src)), (std::vector<double>{13, 16, 0, 0, 3, 4, 0, 0}));
  // 16-bit inputs accumulate in f32: 256 + 1 + 1 is not 256 (rounding at every step would give 256).
  Tensor h = full({1}, 256.0, DType::bf16);
  Tensor hs = ones({2}, DType::bf16);
  EXPECT_EQ(vals(index_add(h, 0, from_vector<int64_t>({0, 0}), hs)), (std::vector<double>{258}));
  Tensor xg = rand_f64({3, 4}, 1).set_requires_grad(), sg = rand_f64({3, 5}, 2).set_requires_grad();
  Tensor i5 = from_vector<int32_t>({3, 1, 3, 0, 3});
  expect_gradients_match([i5](const std::vector<Tensor>& in) { return index_add(in[0], 1, i5, in[1]); }, {xg, sg});
}

TEST(IndexAdd, Errors) {
  Tensor x = zeros({4, 2}, DType::f64);
  const std::string e1 = message_of([&] { index_add(x, 0, from_vector<int64_t>({0, 4}), zeros({2, 2}, DType::f64)); });
  EXPECT_TRUE(contains(e1, "index_add: index value 4 at position 1 is out of range for dim 0 of size 4")) << e1;
  const std::string e2 = message_of([&] { index_add(x, 0, from_vector<int64_t>({0, 1}), zeros({3, 2}, DType::f64)); });
  EXPECT_TRUE(contains(e2, "index_add: argument 'src' has shape (3, 2) but expected (2, 2)")) << e2;
  const std::string e3 = message_of([&] { index_add(x, 0, from_vector<int64_t>({0}), zeros({1, 2})); });
  EXPECT_TRUE(contains(e3, "argument 'src' has dtype float32 but the input has dtype float64")) << e3;
}

TEST(ScatterAdd, DuplicatesAccumulateAndUnusedSrcGetsZeroGradient) {
  Tensor x = zeros({2, 3}, DType::f64);
  Tensor idx = from_vector<int64_t>({0, 0, 2, 1, 1, 1}, {2, 3});
  Tensor src = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(vals(scatter_add(x, 1, idx, src)), (std::vector<double>{3, 0, 3, 0, 15, 0}));
  // index (2, 2) uses only src[:, :2] of a (2, 4) src.
  Tensor xg = rand_f64({3, 3}, 3).set_requires_grad(), sg = rand_f64({2, 4}, 4).set_requires_grad();
  Tensor i2 = from_vector<int64_t>({2, 0, 2, 2}, {2, 2});
  expect_gradients_match([i2](const std::vector<Tensor>& in) { return scatter_add(in[0], 0, i2, in[1]); }, {xg, sg});
  Tensor s = sg.detach().clone().set_requires_grad();
  Tensor out = scatter_add(xg.detach(), 0, i2, s);
  out.backward(ones_like(out));
  EXPECT_EQ(vals(s.grad()), (std::vector<double>{1, 1, 0, 0, 1, 1, 0, 0}));
  const std::string m = message_of([&] { scatter_add(x, 1, from_vector<int64_t>({0, 3}, {1, 2}), src); });
  EXPECT_TRUE(contains(m, "scatter_add: index value 3 at position 1 is out of range for dim 1 of size 3")) << m;
}

// ---- pad / flip / repeat / split / chunk ----------------------------------------------------------------------

TEST(Pad, LastDimFirstOrderValuesAndCrops) {
  Tensor x = from_vector<double>({1, 2, 3, 4}, {2, 2});
  // {left 1, right 0} on the last dim, {top 0, bottom 1} on the first.
  Tensor p = pad(x, {1, 0, 0, 1}, 9);
  EXPECT_EQ(p.shape(), (Shape{3, 3}));
  EXPECT_EQ(vals(p), (std::vector<double>{9, 1, 2, 9, 3, 4, 9, 9, 9}));
  EXPECT_EQ(vals(pad(x, {-1, 1})), (std::vector<double>{2, 0, 4, 0}));
  const std::string m = message_of([&] { pad(x, {1, 1, 1}); });
  EXPECT_TRUE(contains(m, "pad: argument 'pads' has 3 values")) << m;
  Tensor xg = rand_f64({2, 3}, 9).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return pad(in[0], {2, -1, 1, 1}, 0.5); }, {xg});
}

TEST(Flip, ValuesAndGradient) {
  Tensor x = arange(0.0, 6.0, 1.0, DType::f64).reshape({2, 3});
  EXPECT_EQ(vals(flip(x, {1})), (std::vector<double>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(vals(flip(x, {0, 1})), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(vals(flip(x.t(), {0})), (std::vector<double>{2, 5, 1, 4, 0, 3}));
  EXPECT_EQ(ints(flip(from_vector<int64_t>({1, 2, 3}), {0})), (std::vector<int64_t>{3, 2, 1}));
  Tensor xg = rand_f64({3, 2, 2}, 4).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return flip(in[0], {0, -1}); }, {xg});
  const std::string m = message_of([&] { flip(x, {1, -1}); });
  EXPECT_TRUE(contains(m, "flip: dim 1 appears more than once")) << m;
}

TEST(Repeat, TilesLikeTorch) {
  Tensor x = from_vector<double>({1, 2, 3});
  Tensor r = repeat(x, {2, 2});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(vals(r), (std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  Tensor y = from_vector<double>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(vals(repeat(y, {1, 2})), (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4}));
  const std::string m = message_of([&] { repeat(y, {2}); });
  EXPECT_TRUE(contains(m, "repeat: argument 'repeats' has 1 values but the input has shape (2, 2)")) << m;
  Tensor xg = rand_f64({2, 3}, 4).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return repeat(in[0], {3, 1, 2}); }, {xg});
}

TEST(SplitChunk, PiecesAndErrors) {
  Tensor x = arange(0.0, 10.0, 1.0, DType::f64);
  std::vector<Tensor> s = split(x, 4);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(vals(s[2]), (std::vector<double>{8, 9}));
  std::vector<Tensor> s2 = split(x, std::vector<int64_t>{3, 0, 7});
  ASSERT_EQ(s2.size(), 3u);
  EXPECT_EQ(s2[1].numel(), 0);
  EXPECT_EQ(vals(s2[2])[0], 3);
  std::vector<Tensor> c = chunk(x, 3);  // ceil(10 / 3) = 4: pieces of 4, 4, 2
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].numel(), 2);
  EXPECT_EQ(chunk(arange(0.0, 4.0, 1.0, DType::f64), 3).size(), 2u);  // pieces of 2: only two needed
  const std::string m = message_of([&] { split(x, std::vector<int64_t>{3, 3}); });
  EXPECT_TRUE(contains(m, "split: argument 'split_sizes' adds up to 6 but dim 0")) << m;
}

// ---- einsum ---------------------------------------------------------------------------------------------------

namespace {
void expect_near(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  std::vector<double> x = vals(a), y = vals(b);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-12) << i;
}
}  // namespace

TEST(Einsum, CommonForms) {
  Tensor a = rand_f64({3, 4}, 1), b = rand_f64({4, 5}, 2), c = rand_f64({5, 2}, 3);
  expect_near(einsum("ij,jk->ik", {a, b}), matmul(a, b));
  expect_near(einsum("ij, jk", {a, b}), matmul(a, b));  // implicit output, spaces
  expect_near(einsum("ij,jk,kl->il", {a, b, c}), matmul(matmul(a, b), c));
  expect_near(einsum("ij->ji", {a}), a.t());
  expect_near(einsum("ij->j", {a}), sum(a, {0}));
  expect_near(einsum("ij->", {a}), sum(a));
  expect_near(einsum("ji", {a}), a.t());  // implicit: alphabetical output "ij" of a "ji" operand
  Tensor u = rand_f64({3}, 4), v = rand_f64({4}, 5), w = rand_f64({3}, 6);
  expect_near(einsum("i,j->ij", {u, v}), mul(u.reshape({3, 1}), v.reshape({1, 4})));
  expect_near(einsum("i,i->", {u, w}), sum(mul(u, w)));
  expect_near(einsum("ij,i->j", {a, u}), matmul(u.reshape({1, 3}), a).reshape({4}));
  Tensor x = rand_f64({2, 3, 4}, 7), y = rand_f64({2, 4, 5}, 8);
  expect_near(einsum("bij,bjk->bik", {x, y}), matmul(x, y));
  expect_near(einsum("bij,bjk->bki", {x, y}), matmul(x, y).permute({0, 2, 1}));
  Tensor q = rand_f64({2, 2, 3, 4}, 9), k = rand_f64({2, 2, 5, 4}, 10);
  expect_near(einsum("bhqd,bhkd->bhqk", {q, k}), matmul(q, k.transpose(-1, -2)));
  expect_near(einsum("ij,kj->ik", {a, rand_f64({1, 4}, 11).expand({1, 4})}),
              matmul(a, rand_f64({1, 4}, 11).t()));  // size-1 broadcast
  Tensor ag = a.clone().set_requires_grad(), bg = b.clone().set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return einsum("ij,jk->ki", {in[0], in[1]}); }, {ag, bg});
}

TEST(Einsum, UnsupportedAndWrongEquationsAreClearErrors) {
  Tensor a = zeros({3, 3}, DType::f64), b = zeros({4, 5}, DType::f64);
  auto msg = [](const std::function<void()>& f) { return message_of(f); };
  EXPECT_TRUE(contains(msg([&] { einsum("ii->i", {a}); }), "letter 'i' appears twice in operand 0"));
  EXPECT_TRUE(contains(msg([&] { einsum("...ij->ij", {a}); }), "ellipses ('...') are not supported"));
  EXPECT_TRUE(contains(msg([&] { einsum("ij,jk->ik", {a}); }), "names 2 operand(s) but 1 tensor(s) were given"));
  EXPECT_TRUE(contains(msg([&] { einsum("ij,jk->ik", {a, b}); }), "letter 'j' has size 4 in operand 1 but 3"));
  EXPECT_TRUE(contains(msg([&] { einsum("ij->iz", {a}); }), "output letter 'z' does not appear in any operand"));
  EXPECT_TRUE(contains(msg([&] { einsum("ijk->i", {a}); }), "operand 0 has shape (3, 3) (2 dims)"));
  EXPECT_TRUE(contains(msg([&] { einsum("i1->i", {a}); }), "unexpected character '1'"));
}

// ---- norm / std / logsumexp / any / all -----------------------------------------------------------------------

TEST(Norm, ValuesForEachP) {
  Tensor x = from_vector<double>({3, -4, 0, 1, -2, 2}, {2, 3});
  EXPECT_NEAR(vals(norm(x))[0], std::sqrt(34.0), 1e-12);
  EXPECT_EQ(vals(norm(x, 1.0, {1})), (std::vector<double>{7, 5}));
  EXPECT_EQ(vals(norm(x, INFINITY, {0})), (std::vector<double>{3, 4, 2}));
  EXPECT_EQ(vals(norm(x, -INFINITY, {1})), (std::vector<double>{0, 1}));
  EXPECT_EQ(vals(norm(x, 0.0, {1})), (std::vector<double>{2, 3}));
  EXPECT_NEAR(vals(norm(x, 3.0, {1}, true))[0], std::cbrt(27.0 + 64.0), 1e-12);
  EXPECT_EQ(norm(x, 3.0, {1}, true).shape(), (Shape{2, 1}));
  const std::string m = message_of([&] { norm(x, -1.0); });
  EXPECT_TRUE(contains(m, "norm: p = -1 is not supported")) << m;
}

TEST(Norm, GradientAtZeroIsZeroAndElsewhereMatchesFiniteDifferences) {
  Tensor z = zeros({3}, DType::f64).set_requires_grad();
  Tensor n = norm(z);
  n.backward();
  EXPECT_EQ(vals(z.grad()), (std::vector<double>{0, 0, 0}));
  Tensor x = rand_f64({3, 4}, 12).set_requires_grad();
  for (double p : {1.0, 2.0, 3.0, 1.5})
    expect_gradients_match([p](const std::vector<Tensor>& in) { return norm(in[0], p, {1}); }, {x});
}

TEST(Std, ValuesAndZeroSpreadGradient) {
  Tensor x = from_vector<double>({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_NEAR(vals(volt::std(x, {}, /*unbiased=*/false))[0], 2.0, 1e-12);
  EXPECT_NEAR(vals(volt::std(x))[0], std::sqrt(32.0 / 7.0), 1e-12);
  Tensor c = full({4}, 3.0, DType::f64).set_requires_grad();
  Tensor s = volt::std(c);
  s.backward();
  EXPECT_EQ(vals(c.grad()), (std::vector<double>{0, 0, 0, 0}));
  Tensor g = rand_f64({3, 5}, 13).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return volt::std(in[0], {1}, true, true); }, {g});
}

TEST(Logsumexp, StableWithLargeAndInfiniteValues) {
  Tensor x = from_vector<double>({1000, 1000, -kInf, -kInf, 0, std::log(3.0)}, {3, 2});
  std::vector<double> r = vals(logsumexp(x, {1}));
  EXPECT_NEAR(r[0], 1000 + std::log(2.0), 1e-9);
  EXPECT_EQ(r[1], -kInf);
  EXPECT_NEAR(r[2], std::log(4.0), 1e-12);
  EXPECT_EQ(vals(logsumexp(from_vector<double>({kInf, 1.0})))[0], kInf);
  EXPECT_EQ(logsumexp(x, {0, 1}, true).shape(), (Shape{1, 1}));
  Tensor g = rand_f64({3, 4}, 14, -3, 3).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return logsumexp(in[0], {0}); }, {g});
  const std::string m = message_of([] { logsumexp(zeros({2}, DType::i64)); });
  EXPECT_TRUE(contains(m, "logsumexp: argument 'input' has dtype int64; expected a floating dtype")) << m;
}

TEST(AnyAll, ValuesNaNAndEmpty) {
  Tensor x = from_vector<double>({0, 0, 1, kNaN, 2, 3}, {3, 2});
  Tensor a = any(x, {1});
  EXPECT_EQ(a.dtype(), DType::boolean);
  EXPECT_EQ(a.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(all(x, {1}).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));  // NaN is non-zero
  EXPECT_EQ(all(x, {0}, true).shape(), (Shape{1, 2}));
  Tensor e = zeros({0}, DType::f64);
  EXPECT_EQ(any(e).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ(all(e).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1}));
}

// ---- autocast --------------------------------------------------------------------------------------------------

TEST(TensorOpsAutocast, NumericallySensitiveOpsRunInFp32) {
  Tensor h = from_vector<double>({1, 2, 3, 4}, {2, 2}).to(DType::bf16);
  AutocastGuard g(true, DType::bf16);
  EXPECT_EQ(logsumexp(h, {1}).dtype(), DType::f32);
  EXPECT_EQ(cumsum(h, 1).dtype(), DType::f32);
  EXPECT_EQ(cumprod(h, 1).dtype(), DType::f32);
  EXPECT_EQ(norm(h).dtype(), DType::f32);
  EXPECT_EQ(flip(h, {0}).dtype(), DType::bf16);  // no rule: the input's dtype
  EXPECT_EQ(sort(h).first.dtype(), DType::bf16);
  EXPECT_EQ(vals(cumsum(h, 1)), (std::vector<double>{1, 3, 3, 7}));
}

// ---- second derivatives ------------------------------------------------------------------------------------------

TEST(TensorOpsSecondOrder, LogsumexpHessianIsSoftmaxCovariance) {
  Tensor x = from_vector<double>({0.5, -1.0, 2.0}).set_requires_grad();
  autograd::GradOptions o;
  o.create_graph = true;
  Tensor g = autograd::grad(logsumexp(x), x, Tensor(), o);  // softmax(x)
  std::vector<double> p = vals(g);
  for (int64_t i = 0; i < 3; ++i) {
    Tensor e = zeros({3}, DType::f64);
    e.narrow(0, i, 1).fill_(1.0);
    std::vector<double> h = vals(autograd::grad(g, x, e, {.retain_graph = true}));
    for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(h[j], (i == j ? p[i] : 0.0) - p[i] * p[j], 1e-12) << i << "," << j;
  }
}

TEST(TensorOpsSecondOrder, MatchFiniteDifferencesOfFirstGradients) {
  using volt::testing::expect_second_derivatives_match;
  Tensor x = from_vector<double>({0.5, -1.5, 0, 2, 0, 1.25, 0.75, -0.5, 1.5, 1.1, 0.9, 0.3}, {3, 4}).set_requires_grad();
  expect_second_derivatives_match([](const std::vector<Tensor>& in) { return cumprod(in[0], 1); }, {x});
  expect_second_derivatives_match([](const std::vector<Tensor>& in) { return cumprod(in[0], 0); }, {x});
  expect_second_derivatives_match([](const std::vector<Tensor>& in) { return norm(in[0], 3.0, {1}); }, {x});
  expect_second_derivatives_match([](const std::vector<Tensor>& in) { return volt::std(in[0], {0}); }, {x});
  expect_second_derivatives_match(
      [](const std::vector<Tensor>& in) { return einsum("ij,kj->ik", {in[0], square(in[0])}); }, {x});
  expect_second_derivatives_match(
      [](const std::vector<Tensor>& in) { return square(scatter_add(in[0], 1, from_vector<int64_t>({3, 0, 3}, {3, 1}),
                                                                    square(in[0]))); },
      {x});
}

// ---- CUDA against the CPU: long lines (the bitonic sort's padding, many merge steps), ties and NaN ------------------

TEST(TensorOpsCuda, KernelsMatchTheCpuOnLongLinesWithTiesAndNaN) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  // (3, 1000, 2) with values from a small set (many ties) and a few NaNs; sorted along the middle dim.
  Tensor x = mul(cast(cast(mul(rand_f64({3, 1000, 2}, 21, 0, 1), 17.0), DType::i64), DType::f64), 0.25);
  x.narrow(1, 10, 1).fill_(kNaN);
  x.narrow(1, 977, 3).fill_(kNaN);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64}) {
    Tensor c = dt == DType::i64 ? cast(mul(x.narrow(1, 100, 500), 4.0), dt) : x.to(dt);
    Tensor g = c.cuda();
    for (bool desc : {false, true}) {
      auto [vc, ic] = sort(c, 1, desc);
      auto [vg, ig] = sort(g, 1, desc);
      EXPECT_EQ(ints(ig.cpu()), ints(ic)) << dtype_name(dt) << " descending " << desc;
      auto [tc, jc] = topk(c, 37, 1, desc);
      auto [tg, jg] = topk(g, 37, 1, desc);
      EXPECT_EQ(ints(jg.cpu()), ints(jc)) << dtype_name(dt);
    }
    if (dt == DType::i64) continue;
    Tensor finite = c.narrow(1, 100, 500);
    EXPECT_EQ(vals(flip(finite.cuda(), {0, 1}).cpu()), vals(flip(finite, {0, 1})));
    std::vector<double> a = vals(cumsum(finite.cuda(), 1).cpu()), b = vals(cumsum(finite, 1));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-3 * (1 + std::abs(b[i]))) << i;
  }
  // cumprod's backward kernel (zeros included) and the atomicAdd scatters.
  Tensor p = from_vector<double>({0.5, -1.5, 0, 2, 0, 1.25, 0.75, -0.5, 1.5, 1.1, 0.9, 0.3}, {3, 4});
  Tensor pc = p.clone().set_requires_grad(), pg = p.cuda().set_requires_grad();
  cumprod(pc, 1).backward(ones({3, 4}, DType::f64));
  cumprod(pg, 1).backward(ones({3, 4}, DType::f64, cuda_device(0)));
  EXPECT_EQ(vals(pg.grad().cpu()), vals(pc.grad()));
  Tensor idx = from_vector<int64_t>({0, 2, 0, 0, 1, 2, 2});
  Tensor src = rand_f64({7, 3}, 22);
  std::vector<double> ia = vals(index_add(zeros({3, 3}, DType::f64).cuda(), 0, idx.cuda(), src.cuda()).cpu()),
                      ib = vals(index_add(zeros({3, 3}, DType::f64), 0, idx, src));
  for (size_t i = 0; i < ia.size(); ++i) EXPECT_NEAR(ia[i], ib[i], 1e-12);
}
