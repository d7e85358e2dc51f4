// silu, gelu(approximate="tanh"), layer_norm, group_norm and embedding's padding_idx: hand-computed values, naive
// references, finite-difference gradients (input, weight and bias), half precision, autocast and error messages.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/runtime/autocast.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {

Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

// Naive group normalisation of a contiguous (N, C, S) tensor (layer_norm is N rows, G = 1, C = row, S = 1).
std::vector<double> group_norm_ref(const std::vector<double>& x, int64_t N, int64_t C, int64_t S, int64_t G,
                                   const std::vector<double>& w, const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  const int64_t cpg = C / G;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0, ss = 0;
      const int64_t base = (n * C + g * cpg) * S, cnt = cpg * S;
      for (int64_t i = 0; i < cnt; ++i) s += x[base + i];
      const double m = s / cnt;
      for (int64_t i = 0; i < cnt; ++i) ss += (x[base + i] - m) * (x[base + i] - m);
      const double rstd = 1.0 / std::sqrt(ss / cnt + eps);
      for (int64_t i = 0; i < cnt; ++i) {
        const int64_t c = g * cpg + i / S;
        y[base + i] = (x[base + i] - m) * rstd * (w.empty() ? 1.0 : w[c]) + (b.empty() ? 0.0 : b[c]);
      }
    }
  return y;
}

}  // namespace

// ---- silu / gelu tanh ----------------------------------------------------------------------------------------

TEST(Silu, ValuesAndDerivative) {
  Tensor x = leaf(from_vector<double>({-2, 0, 1, 3}, {4}));
  Tensor y = silu(x);
  expect_close(y, {-0.2384058440442351, 0.0, 0.7310585786300049, 2.8577223804673}, 1e-14);
  sum(y).backward();
  expect_close(x.grad(), {-0.09078424878489547, 0.5, 0.9276705118714869, 1.0881041060151693}, 1e-14);
  expect_close(x.detach().silu(), {-0.2384058440442351, 0.0, 0.7310585786300049, 2.8577223804673}, 1e-14);
}

TEST(Silu, FiniteDifferencesAndExtremes) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return silu(in[0]); }, {leaf(rand_f64({3, 5}, 1, -6, 6))});
  // Large magnitudes neither overflow nor produce NaN: silu(-100) ~ -0, silu(100) = 100.
  expect_close(silu(from_vector<float>({-100, 100}, {2})), {0.0, 100.0}, 1e-6);
  // Integer inputs compute in float32, as the other activations do.
  EXPECT_EQ(silu(from_vector<int64_t>({1, 2}, {2})).dtype(), DType::f32);
}

TEST(Silu, HalfTypesComputeInFloat) {
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = from_vector<float>({-2, 0.5, 1, 3}, {4}).to(dt);
    Tensor y = silu(x);
    EXPECT_EQ(y.dtype(), dt);
    expect_close(y, silu(x.to(DType::f64)).to_vector<double>(), 2e-2, 1e-2);
  }
}

TEST(GeluTanh, ValuesDerivativeAndSpellings) {
  Tensor x = from_vector<double>({-1.5, 0, 1, 2}, {4});
  const std::vector<double> expected = {-0.10042842301976707, 0.0, 0.8411919906082768, 1.954597694087775};
  expect_close(gelu(x, GeluApproximate::Tanh), expected, 1e-14);
  expect_close(gelu(x, "tanh"), expected, 1e-14);
  // "none" is the exact form, and it stays the default.
  expect_close(gelu(x, "none"), gelu(x).to_vector<double>(), 0);
  EXPECT_GT(std::abs(gelu(x).to_vector<double>()[0] - expected[0]), 1e-5);  // the forms differ
  expect_gradients_match([](const std::vector<Tensor>& in) { return gelu(in[0], GeluApproximate::Tanh); },
                         {leaf(rand_f64({4, 4}, 2, -4, 4))});
  VOLT_EXPECT_ERROR(gelu(x, "fast"), "gelu", "approximate", "\"none\" or \"tanh\"", "\"fast\"");
}

// ---- layer_norm ------------------------------------------------------------------------------------------------

TEST(LayerNorm, HandComputedRow) {
  Tensor x = from_vector<double>({1, 2, 3, 4}, {1, 4});
  Tensor w = from_vector<double>({2, 0.5, 1, -1}, {4}), b = from_vector<double>({0.1, 0.2, 0.3, 0.4}, {4});
  expect_close(layer_norm(x, {4}, w, b, 0.0),
               {-2.5832815729997476, -0.023606797749978953, 0.7472135954999579, -0.9416407864998738}, 1e-14);
  // No affine: zero mean, unit (biased) variance per row.
  expect_close(layer_norm(x, {4}, Tensor(), Tensor(), 0.0),
               {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738}, 1e-14);
}

TEST(LayerNorm, MatchesNaiveReferenceOverSeveralTrailingDims) {
  Tensor x = rand_f64({2, 3, 4, 5}, 3, -2, 3);
  Tensor w = rand_f64({4, 5}, 4, 0.5, 1.5), b = rand_f64({4, 5}, 5);
  Tensor y = layer_norm(x, {4, 5}, w, b, 1e-5);
  EXPECT_EQ(y.shape(), x.shape());
  expect_close(y,
               group_norm_ref(x.to_vector<double>(), 6, 20, 1, 1, w.to_vector<double>(), b.to_vector<double>(), 1e-5),
               1e-12);
  // A constant row normalises to zero (variance 0 + eps), not NaN.
  expect_close(layer_norm(full({2, 3}, 7.0, DType::f64), {3}), {0, 0, 0, 0, 0, 0}, 0);
}

TEST(LayerNorm, GradientsOfInputWeightAndBias) {
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], {6}, in[1], in[2], 1e-5); },
      {leaf(rand_f64({3, 6}, 6, -2, 2)), leaf(rand_f64({6}, 7, 0.5, 1.5)), leaf(rand_f64({6}, 8))}, 1e-6, 1e-6, 1e-5);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 3}, in[1], Tensor(), 1e-3); },
      {leaf(rand_f64({2, 2, 2, 3}, 9, -2, 2)), leaf(rand_f64({2, 3}, 10, 0.5, 1.5))}, 1e-6, 1e-6, 1e-5);
  expect_gradients_match([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}); },
                         {leaf(rand_f64({4, 5}, 11, -2, 2))}, 1e-6, 1e-6, 1e-5);
  // Only the parameters require grad (x is a constant input).
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
      {rand_f64({3, 4}, 12), leaf(rand_f64({4}, 13)), leaf(rand_f64({4}, 14))}, 1e-6, 1e-6, 1e-5);
}

TEST(LayerNorm, HalfInputsWithFloatOrHalfParameters) {
  Tensor x64 = rand_f64({4, 8}, 15, -2, 2), w64 = rand_f64({8}, 16, 0.5, 1.5), b64 = rand_f64({8}, 17);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = x64.to(dt);
    Tensor ref = layer_norm(x.to(DType::f64), {8}, w64, b64);
    for (DType pdt : {DType::f32, dt}) {
      Tensor w = leaf(w64.to(pdt)), b = leaf(b64.to(pdt)), xl = leaf(x.clone());
      Tensor y = layer_norm(xl, {8}, w, b);
      EXPECT_EQ(y.dtype(), dt);
      expect_close(y, ref.to_vector<double>(), 3e-2, 2e-2);
      sum(y).backward();
      EXPECT_EQ(w.grad().dtype(), pdt);
      EXPECT_EQ(b.grad().dtype(), pdt);
      EXPECT_EQ(xl.grad().dtype(), dt);
      // d(sum y)/d(bias) = number of rows.
      expect_close(b.grad(), std::vector<double>(8, 4.0), 0);
    }
  }
}

TEST(LayerNorm, AutocastRunsInFp32) {
  Tensor x = rand_f64({3, 6}, 18).to(DType::bf16);
  Tensor w = leaf(ones({6})), b = leaf(zeros({6}));
  Tensor y;
  {
    AutocastGuard g(true, DType::bf16);
    y = layer_norm(x, {6}, w, b);
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.to_vector<float>(), layer_norm(x.to(DType::f32), {6}, ones({6}), zeros({6})).to_vector<float>());
  sum(y).backward();
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

TEST(LayerNorm, ClearErrors) {
  Tensor x = zeros({2, 3, 5});
  VOLT_EXPECT_ERROR(layer_norm(x, {4}), "layer_norm", "(2, 3, 5)", "normalized_shape is (4,)", "last 1 dim");
  VOLT_EXPECT_ERROR(layer_norm(x, {3, 4}), "layer_norm", "normalized_shape is (3, 4)");
  VOLT_EXPECT_ERROR(layer_norm(x, {}), "layer_norm", "normalized_shape is empty");
  VOLT_EXPECT_ERROR(layer_norm(zeros({5}), {2, 5}), "layer_norm", "x has shape (5,)");
  VOLT_EXPECT_ERROR(layer_norm(x, {5}, ones({4})), "layer_norm", "weight has shape (4,)", "needs (5,)");
  VOLT_EXPECT_ERROR(layer_norm(x, {5}, ones({5}), zeros({1, 5})), "layer_norm", "bias has shape (1, 5)");
  VOLT_EXPECT_ERROR(layer_norm(x, {5}, ones({5}, DType::f64)), "layer_norm", "weight has dtype float64",
                    "expected float32");
  VOLT_EXPECT_ERROR(layer_norm(zeros({2, 5}, DType::i64), {5}), "layer_norm", "floating-point", "int64");
  VOLT_EXPECT_ERROR(layer_norm(x, {5}, Tensor(), Tensor(), -1.0), "layer_norm", "eps must be non-negative");
  VOLT_EXPECT_ERROR(layer_norm(Tensor(), {5}), "layer_norm", "undefined");
}

TEST(LayerNorm, EmptyBatch) {
  Tensor x = leaf(zeros({0, 4}, DType::f64)), w = leaf(ones({4}, DType::f64));
  Tensor y = layer_norm(x, {4}, w);
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  sum(y).backward();
  expect_close(w.grad(), {0, 0, 0, 0}, 0);
}

// ---- group_norm -------------------------------------------------------------------------------------------------

TEST(GroupNorm, HandComputedGroups) {
  // Channels [1, 2], [3, 4] form group 0 and [10, 10], [10, 14] group 1.
  Tensor x = from_vector<double>({1, 2, 3, 4, 10, 10, 10, 14}, {1, 4, 2});
  Tensor w = from_vector<double>({2, 0.5, 1, -1}, {4}), b = from_vector<double>({0.1, 0.2, 0.3, 0.4}, {4});
  expect_close(group_norm(x, 2, w, b, 0.0),
               {-2.5832815729997476, -0.7944271909999158, 0.42360679774997896, 0.8708203932499369, -0.2773502691896258,
                -0.2773502691896258, 0.9773502691896258, -1.3320508075688776},
               1e-14);
}

TEST(GroupNorm, MatchesNaiveReference) {
  struct Case { Shape shape; int64_t groups; };
  for (const Case& c : {Case{{2, 6, 3, 2}, 3}, Case{{3, 4}, 2}, Case{{2, 4, 5}, 1}, Case{{2, 4, 5}, 4}}) {
    Tensor x = rand_f64(c.shape, 19, -2, 3);
    const int64_t C = c.shape[1], S = x.numel() / (c.shape[0] * C);
    Tensor w = rand_f64({C}, 20, 0.5, 1.5), b = rand_f64({C}, 21);
    expect_close(group_norm(x, c.groups, w, b),
                 group_norm_ref(x.to_vector<double>(), c.shape[0], C, S, c.groups, w.to_vector<double>(),
                                b.to_vector<double>(), 1e-5),
                 1e-12);
    expect_close(group_norm(x, c.groups),
                 group_norm_ref(x.to_vector<double>(), c.shape[0], C, S, c.groups, {}, {}, 1e-5), 1e-12);
  }
}

TEST(GroupNorm, GradientsOfInputWeightAndBias) {
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
      {leaf(rand_f64({2, 4, 3}, 22, -2, 2)), leaf(rand_f64({4}, 23, 0.5, 1.5)), leaf(rand_f64({4}, 24))}, 1e-6, 1e-6,
      1e-5);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return group_norm(in[0], 3, in[1], in[2]); },
      {leaf(rand_f64({2, 6, 2, 2}, 25, -2, 2)), leaf(rand_f64({6}, 26, 0.5, 1.5)), leaf(rand_f64({6}, 27))}, 1e-6,
      1e-6, 1e-5);
  expect_gradients_match([](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
                         {leaf(rand_f64({3, 4}, 28, -2, 2)), leaf(rand_f64({4}, 29)), leaf(rand_f64({4}, 30))}, 1e-6,
                         1e-6, 1e-5);
}

TEST(GroupNorm, AutocastAndHalfInputs) {
  Tensor x = rand_f64({2, 4, 3}, 31).to(DType::f16);
  {
    AutocastGuard g(true, DType::f16);
    EXPECT_EQ(group_norm(x, 2, ones({4}), zeros({4})).dtype(), DType::f32);
  }
  Tensor y = group_norm(x, 2, ones({4}), zeros({4}));
  EXPECT_EQ(y.dtype(), DType::f16);
  expect_close(y, group_norm(x.to(DType::f64), 2).to_vector<double>(), 2e-2, 1e-2);
}

TEST(GroupNorm, ClearErrors) {
  Tensor x = zeros({2, 6, 4});
  VOLT_EXPECT_ERROR(group_norm(x, 4), "group_norm", "number of channels (6", "divisible by num_groups (4)");
  VOLT_EXPECT_ERROR(group_norm(x, 0), "group_norm", "num_groups must be positive, got 0");
  VOLT_EXPECT_ERROR(group_norm(zeros({6}), 2), "group_norm", "(N, C, *)", "(6,)");
  VOLT_EXPECT_ERROR(group_norm(x, 3, ones({4})), "group_norm", "weight has shape (4,)", "needs (6,)",
                    "one value per channel");
  VOLT_EXPECT_ERROR(group_norm(x, 3, ones({6}), zeros({2, 3})), "group_norm", "bias has shape (2, 3)");
  VOLT_EXPECT_ERROR(group_norm(x, 3, ones({6}, DType::f16)), "group_norm", "weight has dtype float16");
}

// ---- embedding padding_idx ----------------------------------------------------------------------------------------

TEST(EmbeddingPadding, PaddingRowGetsNoGradient) {
  Tensor w = leaf(rand_f64({5, 3}, 32));
  Tensor idx = from_vector<int64_t>({0, 2, 2, 4, 0}, {5});
  Tensor y = embedding(w, idx, 2);
  // The forward still reads the padding row (the module keeps it at zero).
  expect_close(y.select(0, 1), w.detach().select(0, 2).to_vector<double>(), 0);
  sum(y).backward();
  expect_close(w.grad(), {2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1}, 0);
}

TEST(EmbeddingPadding, NegativePaddingIndexCountsFromTheEndAndI32Indices) {
  Tensor w = leaf(rand_f64({4, 2}, 33));
  Tensor idx = from_vector<int64_t>({3, 1, 3}, {3}).to(DType::i32);
  sum(embedding(w, idx, -1)).backward();  // -1 = row 3
  expect_close(w.grad(), {0, 0, 1, 1, 0, 0, 0, 0}, 0);
  // Other rows match finite differences.
  expect_gradients_match([idx](const std::vector<Tensor>& in) { return embedding(in[0], idx, 0); },
                         {leaf(rand_f64({4, 2}, 34))});
}

TEST(EmbeddingPadding, HalfWeightsKeepThePaddingRowZero) {
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor w = leaf(ones({3, 2}, dt));
    sum(embedding(w, from_vector<int64_t>({1, 1, 0}, {3}), 1)).backward();
    EXPECT_EQ(w.grad().dtype(), dt);
    expect_close(w.grad(), {1, 1, 0, 0, 0, 0}, 0);
  }
}

TEST(EmbeddingPadding, ClearErrors) {
  Tensor w = zeros({10, 4});
  VOLT_EXPECT_ERROR(embedding(w, from_vector<int64_t>({1, 12}, {2})), "embedding", "value 12", "position 1",
                    "size 10");
  VOLT_EXPECT_ERROR(embedding(w, from_vector<int64_t>({-1}, {1})), "embedding", "value -1", "size 10");
  VOLT_EXPECT_ERROR(embedding(w, from_vector<int64_t>({1}, {1}), 10), "embedding", "padding_idx 10",
                    "size 10", "-10 <= padding_idx < 10");
  VOLT_EXPECT_ERROR(embedding(w, from_vector<int64_t>({1}, {1}), -11), "embedding", "padding_idx -11");
  VOLT_EXPECT_ERROR(embedding(w, from_vector<float>({1}, {1})), "embedding", "int64 or int32", "float32");
}
