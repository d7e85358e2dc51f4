// nn/losses.h: binary_cross_entropy(_with_logits), smooth_l1_loss, huber_loss, kl_div, cosine_similarity.
// Values by hand and against f64 formulas, gradients against finite differences, autocast rules and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/nn.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {
Tensor leaf(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return rand_f64(s, seed, lo, hi).set_requires_grad(true);
}
double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

TEST(Losses, BceWithLogitsByHandAndStable) {
  Tensor x = from_vector<double>({0, 0, 2, -100, 100, 30});
  Tensor t = from_vector<double>({1, 0, 1, 1, 0, 1});
  expect_close(nn::binary_cross_entropy_with_logits(x, t, Tensor(), Reduction::None),
               {std::log(2.0), std::log(2.0), std::log1p(std::exp(-2.0)), 100.0, 100.0, std::log1p(std::exp(-30.0))},
               1e-12, 1e-12);
  // In f32 as well: large logits stay finite and exact.
  expect_close(nn::binary_cross_entropy_with_logits(x.to(DType::f32), t.to(DType::f32), Tensor(), Reduction::None),
               {std::log(2.0), std::log(2.0), std::log1p(std::exp(-2.0)), 100.0, 100.0, 0.0}, 1e-6, 1e-6);
}

TEST(Losses, BceWithLogitsWeightsAndReductionsMatchTheFormula) {
  Tensor x = rand_f64({4, 3}, 1, -3, 3), t = rand_f64({4, 3}, 2, 0, 1);
  Tensor w = rand_f64({3}, 3, 0.5, 2), pw = rand_f64({3}, 4, 0.5, 3);
  const auto xv = x.to_vector<double>(), tv = t.to_vector<double>(), wv = w.to_vector<double>(),
             pv = pw.to_vector<double>();
  std::vector<double> ref;
  double total = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double s = sigmoid_d(xv[i]);
    const double l = -wv[i % 3] * (pv[i % 3] * tv[i] * std::log(s) + (1 - tv[i]) * std::log(1 - s));
    ref.push_back(l);
    total += l;
  }
  expect_close(nn::binary_cross_entropy_with_logits(x, t, w, Reduction::None, pw), ref, 1e-12, 1e-12);
  expect_close(nn::binary_cross_entropy_with_logits(x, t, w, Reduction::Sum, pw), {total}, 1e-12, 1e-12);
  expect_close(nn::binary_cross_entropy_with_logits(x, t, w, Reduction::Mean, pw), {total / 12}, 1e-12, 1e-12);
}

TEST(Losses, BceWithLogitsGradients) {
  // At x = 0 the input gradient is sigmoid(0) - t exactly (the |x| of the stable form has no kink there).
  Tensor x = zeros({2}, DType::f64).set_requires_grad(true);
  nn::binary_cross_entropy_with_logits(x, from_vector<double>({1, 0}), Tensor(), Reduction::Sum).backward();
  expect_close(x.grad(), {-0.5, 0.5}, 1e-15);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return nn::binary_cross_entropy_with_logits(in[0], in[1], in[2], Reduction::None, in[3]);
      },
      {leaf({3, 4}, 5, -3, 3), leaf({3, 4}, 6, 0.05, 0.95), leaf({4}, 7, 0.5, 2), leaf({1, 4}, 8, 0.5, 3)});
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return nn::binary_cross_entropy_with_logits(in[0], in[1]); },
      {leaf({5}, 9, -2, 2), leaf({5}, 10, 0, 1)});
}

TEST(Losses, BinaryCrossEntropy) {
  Tensor x = from_vector<double>({0.5, 0.9, 0, 1, 0});
  Tensor t = from_vector<double>({1, 0, 0, 1, 1});
  // log clamps at -100: x = 0 with t = 1 costs 100, not inf.
  expect_close(nn::binary_cross_entropy(x, t, Tensor(), Reduction::None), {std::log(2.0), -std::log(0.1), 0, 0, 100},
               1e-12, 1e-12);
  Tensor w = from_vector<double>({2, 1, 1, 1, 1});
  expect_close(nn::binary_cross_entropy(x, t, w, Reduction::Sum), {2 * std::log(2.0) - std::log(0.1) + 100}, 1e-12);
  // Gradient at the clamp stays finite (PyTorch's (x - t) / max(x (1 - x), 1e-12)).
  Tensor x0 = from_vector<double>({0.0, 0.25}).set_requires_grad(true);
  nn::binary_cross_entropy(x0, from_vector<double>({0.0, 1.0}), Tensor(), Reduction::Sum).backward();
  expect_close(x0.grad(), {0.0, -4.0}, 1e-12);
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return nn::binary_cross_entropy(in[0], in[1], in[2], Reduction::None);
      },
      {leaf({3, 4}, 11, 0.1, 0.9), leaf({3, 4}, 12, 0, 1), leaf({4}, 13, 0.5, 2)});
}

TEST(Losses, SmoothL1AndHuber) {
  Tensor in = from_vector<double>({-3, -0.5, 0, 0.2, 2}), tgt = zeros({5}, DType::f64);
  expect_close(nn::smooth_l1_loss(in, tgt, Reduction::None), {2.5, 0.125, 0, 0.02, 1.5}, 1e-12);
  expect_close(nn::smooth_l1_loss(in, tgt, Reduction::None, 0.5), {2.75, 0.25, 0, 0.04, 1.75}, 1e-12);
  expect_close(nn::smooth_l1_loss(in, tgt, Reduction::None, 0.0), {3, 0.5, 0, 0.2, 2}, 1e-12);  // L1
  expect_close(nn::huber_loss(in, tgt, Reduction::None, 2.0), {4, 0.125, 0, 0.02, 2}, 1e-12);
  expect_close(nn::huber_loss(in, tgt), {(2.5 + 0.125 + 0.02 + 1.5) / 5}, 1e-12);
  // huber(delta) = delta * smooth_l1(beta = delta)
  Tensor a = rand_f64({4, 5}, 14, -3, 3), b = rand_f64({4, 5}, 15, -3, 3);
  expect_close(nn::huber_loss(a, b, Reduction::Sum, 0.7),
               {0.7 * nn::smooth_l1_loss(a, b, Reduction::Sum, 0.7).item()}, 1e-12, 1e-12);
  // Broadcasting target.
  EXPECT_EQ(nn::smooth_l1_loss(a, b.select(0, 0), Reduction::None).shape(), (Shape{4, 5}));
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return nn::smooth_l1_loss(in[0], in[1], Reduction::None, 0.8); },
      {leaf({3, 4}, 16, -2, 2), leaf({3, 4}, 17, -2, 2)});
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return nn::huber_loss(in[0], in[1], Reduction::Mean, 1.3); },
      {leaf({3, 4}, 18, -2, 2), leaf({4}, 19, -2, 2)});
}

TEST(Losses, KlDiv) {
  Tensor logq = log(from_vector<double>({0.25, 0.25, 0.5}, {1, 3}));
  Tensor p = from_vector<double>({0.5, 0.5, 0}, {1, 3});
  const double h = 0.5 * std::log(2.0);
  expect_close(nn::kl_div(logq, p, "none"), {h, h, 0}, 1e-12);
  expect_close(nn::kl_div(logq, p, "sum"), {std::log(2.0)}, 1e-12);
  expect_close(nn::kl_div(logq, p), {std::log(2.0) / 3}, 1e-12);
  expect_close(nn::kl_div(logq, p, "batchmean"), {std::log(2.0)}, 1e-12);
  expect_close(nn::kl_div(logq, p, Reduction::Sum), {std::log(2.0)}, 1e-12);
  // log_target: the same divergence from log-probabilities.
  Tensor p2 = from_vector<double>({0.5, 0.25, 0.25}, {1, 3});
  expect_close(nn::kl_div(logq, log(p2), "sum", true), {0.5 * std::log(2.0) + 0.25 * std::log(0.5)}, 1e-12);
  // batchmean divides by the batch size.
  Tensor a = log_softmax(rand_f64({4, 5}, 20), 1), b = softmax(rand_f64({4, 5}, 21), 1);
  expect_close(nn::kl_div(a, b, "batchmean"), {nn::kl_div(a, b, "sum").item() / 4}, 1e-12);
  // A zero target gives no NaN, in the value or the gradients.
  Tensor tz = from_vector<double>({0.0, 1.0}).set_requires_grad(true);
  Tensor lq = from_vector<double>({-1.0, -0.5}).set_requires_grad(true);
  Tensor l = nn::kl_div(lq, tz, "sum");
  l.backward();
  expect_close(l, {0.5}, 1e-12);
  expect_close(lq.grad(), {0.0, -1.0}, 1e-12);
  // log t + 1 - input at t = 1; at t = 0 the t log t term contributes 0 (not -inf), leaving -input.
  expect_close(tz.grad(), {1.0, 1.5}, 1e-12);
  expect_gradients_match([](const std::vector<Tensor>& in) { return nn::kl_div(in[0], in[1], "batchmean"); },
                         {leaf({3, 4}, 22, -3, 0), leaf({3, 4}, 23, 0.05, 1)});
  expect_gradients_match([](const std::vector<Tensor>& in) { return nn::kl_div(in[0], in[1], "none", true); },
                         {leaf({3, 4}, 24, -3, 0), leaf({3, 4}, 25, -3, 0)});
  VOLT_EXPECT_ERROR(nn::kl_div(a, b, "average"), "kl_div", "\"batchmean\"", "\"average\"");
}

TEST(Losses, CosineSimilarity) {
  Tensor x1 = from_vector<double>({1, 0, 3, 4, 0, 0}, {3, 2});
  Tensor x2 = from_vector<double>({1, 1, -3, -4, 1, 1}, {3, 2});
  expect_close(nn::cosine_similarity(x1, x2), {1 / std::sqrt(2.0), -1, 0}, 1e-12);
  expect_close(nn::cosine_similarity(x1, x2, 0), {-8 / std::sqrt(110.0), -16 / (4 * std::sqrt(18.0))},
               1e-12);
  // Broadcasting: one vector against a batch.
  Tensor a = rand_f64({4, 3}, 26), b = rand_f64({3}, 27);
  expect_close(nn::cosine_similarity(a, b, -1), nn::cosine_similarity(a, b.unsqueeze(0).expand({4, 3}), 1)
                                                    .to_vector<double>(), 1e-12);
  // A zero vector: similarity 0 and finite gradients.
  Tensor z = zeros({1, 3}, DType::f64).set_requires_grad(true);
  Tensor s = nn::cosine_similarity(z, ones({1, 3}, DType::f64));
  s.sum().backward();
  expect_close(s, {0}, 0);
  for (double g : z.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
  expect_gradients_match([](const std::vector<Tensor>& in) { return nn::cosine_similarity(in[0], in[1], 1); },
                         {leaf({2, 4, 3}, 28), leaf({4, 1}, 29)});
  VOLT_EXPECT_ERROR(nn::cosine_similarity(rand_f64({3, 2}, 1), rand_f64({3, 4}, 2)), "cosine_similarity");
  VOLT_EXPECT_ERROR(nn::cosine_similarity(rand_f64({3, 2}, 1), rand_f64({3, 2}, 2), 2), "cosine_similarity");
}

TEST(Losses, AutocastRules) {
  Tensor x = randn({4}).to(DType::bf16), t = rand({4}).to(DType::bf16);
  AutocastGuard on(true, DType::bf16);
  EXPECT_EQ(nn::binary_cross_entropy_with_logits(x, t).dtype(), DType::f32);
  EXPECT_EQ(nn::smooth_l1_loss(x, t).dtype(), DType::f32);
  EXPECT_EQ(nn::huber_loss(x, t).dtype(), DType::f32);
  EXPECT_EQ(nn::kl_div(x, t).dtype(), DType::f32);
  EXPECT_EQ(nn::cosine_similarity(x.unsqueeze(0), t.unsqueeze(0)).dtype(), DType::f32);
  VOLT_EXPECT_ERROR(nn::binary_cross_entropy(sigmoid(x), t), "binary_cross_entropy", "autocast",
                    "binary_cross_entropy_with_logits");
}

TEST(Losses, Errors) {
  Tensor x = randn({4, 3});
  VOLT_EXPECT_ERROR(nn::binary_cross_entropy_with_logits(x, rand({4})), "binary_cross_entropy_with_logits",
                    "target has shape (4,)", "(4, 3)");
  VOLT_EXPECT_ERROR(nn::binary_cross_entropy_with_logits(x, rand({4, 3}), Tensor(), Reduction::Mean, rand({4})),
                    "pos_weight has shape (4,)", "does not broadcast");
  VOLT_EXPECT_ERROR(nn::binary_cross_entropy(x, rand({4, 3}), rand({2, 4, 3})), "binary_cross_entropy",
                    "weight has shape (2, 4, 3)");
  VOLT_EXPECT_ERROR(nn::binary_cross_entropy(x, ones({4, 3}, DType::i64)), "binary_cross_entropy", "target", "int64");
  VOLT_EXPECT_ERROR(nn::smooth_l1_loss(x, x, Reduction::Mean, -1), "smooth_l1_loss", "beta (-1)");
  VOLT_EXPECT_ERROR(nn::huber_loss(x, x, Reduction::Mean, 0), "huber_loss", "delta (0)");
  VOLT_EXPECT_ERROR(nn::huber_loss(x, randn({2, 3})), "huber_loss");
}
