// Initialisation statistics and layer forwards.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>

using namespace volt;
using volt::testing::expect_close;

namespace {
std::pair<double, double> min_max(const Tensor& t) {
  auto v = t.to_vector<double>();
  return {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}
double mean_of(const Tensor& t) {
  auto v = t.to_vector<double>();
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double var_of(const Tensor& t) {
  auto v = t.to_vector<double>();
  double m = mean_of(t), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}
}  // namespace

TEST(Init, LinearBoundsAreOneOverSqrtFanIn) {
  manual_seed(1);
  nn::Linear l(784, 128);
  const double bound = 1.0 / std::sqrt(784.0);
  auto [lo, hi] = min_max(l.weight);
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.98 * bound);  // 100k draws reach the edges
  EXPECT_GT(hi, 0.98 * bound);
  EXPECT_NEAR(mean_of(l.weight), 0.0, 0.01 * bound);
  EXPECT_NEAR(var_of(l.weight), bound * bound / 3, 0.02 * bound * bound / 3);
  auto [blo, bhi] = min_max(l.bias);
  EXPECT_GE(blo, -bound);
  EXPECT_LE(bhi, bound);
  EXPECT_EQ(l.weight.shape(), (Shape{128, 784}));
  EXPECT_TRUE(l.weight.requires_grad());
  EXPECT_TRUE(l.weight.is_leaf());
}

TEST(Init, ManualSeedMakesModelsReproducible) {
  manual_seed(42);
  nn::Linear a(20, 7);
  manual_seed(42);
  nn::Linear b(20, 7);
  nn::Linear c(20, 7);  // continues the stream: different
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  EXPECT_EQ(a.bias.to_vector<float>(), b.bias.to_vector<float>());
  EXPECT_NE(a.weight.to_vector<float>(), c.weight.to_vector<float>());
}

TEST(Init, FansGainsAndOtherInitialisers) {
  Tensor w = empty({16, 3, 5, 5});
  auto [fi, fo] = nn::init::calculate_fan_in_and_fan_out(w);
  EXPECT_EQ(fi, 75);
  EXPECT_EQ(fo, 400);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  VOLT_EXPECT_ERROR(nn::init::calculate_gain("swish"), "swish");

  manual_seed(3);
  Tensor k = empty({256, 400});
  nn::init::kaiming_normal_(k, 0.0, nn::init::FanMode::FanIn, "relu");
  EXPECT_NEAR(std::sqrt(var_of(k)), std::sqrt(2.0 / 400), 0.02 * std::sqrt(2.0 / 400));
  Tensor x = empty({300, 200});
  nn::init::xavier_uniform_(x);
  const double xb = std::sqrt(6.0 / 500);
  auto [lo, hi] = min_max(x);
  EXPECT_GE(lo, -xb);
  EXPECT_LE(hi, xb);
  EXPECT_GT(hi, 0.99 * xb);
  Tensor z = ones({3});
  nn::init::zeros_(z);
  expect_close(z, {0, 0, 0});
  VOLT_EXPECT_ERROR(nn::init::kaiming_uniform_(z), "at least 2 dims");
}

TEST(Layers, LinearForwardMatchesManual) {
  nn::Linear l(3, 2);
  {
    NoGradGuard ng;
    l.weight.copy_(from_vector<float>({1, 2, 3, -1, 0, 1}, {2, 3}));
    l.bias.copy_(from_vector<float>({0.5f, -0.5f}));
  }
  Tensor y = l(from_vector<float>({1, 1, 1, 2, 0, -1}, {2, 3}));
  expect_close(y, {6.5, -0.5, -0.5, -3.5});
  y.sum().backward();
  expect_close(l.bias.grad(), {2, 2});
  expect_close(l.weight.grad(), {3, 1, 0, 3, 1, 0});
  nn::Linear nb(3, 2, false);
  EXPECT_FALSE(nb.bias.defined());
  EXPECT_EQ(nb.named_parameters().size(), 1u);
  VOLT_EXPECT_ERROR(l(zeros({2, 4})), "in_features=3");
}

// LinearOptions::activation: the fused op, the same parameters under the same names and init as a plain Linear,
// and (ReLU, CPU) the same bits as Linear followed by ReLU, forward and backward.
TEST(Layers, LinearWithActivationMatchesLinearThenActivation) {
  manual_seed(3);
  nn::Linear plain(5, 4);
  manual_seed(3);
  nn::Linear fused(5, 4, {.activation = Activation::ReLU});
  EXPECT_EQ(fused.activation, Activation::ReLU);
  EXPECT_EQ(plain.activation, Activation::None);
  const nn::StateDict ps = plain.state_dict(), fs = fused.state_dict();
  ASSERT_EQ(fs.size(), 2u);
  for (size_t i = 0; i < fs.size(); ++i) {
    EXPECT_EQ(fs[i].first, ps[i].first);
    EXPECT_EQ(fs[i].second.to_vector<float>(), ps[i].second.to_vector<float>()) << fs[i].first;
  }
  EXPECT_EQ(fs[0].first, "weight");
  EXPECT_EQ(fs[1].first, "bias");
  Tensor x = randn({3, 2, 5});
  Tensor yf = fused(x), yp = relu(plain(x));
  EXPECT_EQ(yf.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(yf.to_vector<float>(), yp.to_vector<float>());
  sum(yf * yf).backward();
  sum(yp * yp).backward();
  EXPECT_EQ(fused.weight.grad().to_vector<float>(), plain.weight.grad().to_vector<float>());
  EXPECT_EQ(fused.bias.grad().to_vector<float>(), plain.bias.grad().to_vector<float>());
  EXPECT_NE(fused.repr().find("activation=relu"), std::string::npos) << fused.repr();
  EXPECT_EQ(plain.repr().find("activation"), std::string::npos) << plain.repr();
  // A checkpoint of one loads into the other.
  nn::Linear other(5, 4, {.activation = Activation::GELU});
  other.load_state_dict(fs);
  EXPECT_EQ(other.weight.to_vector<float>(), fused.weight.to_vector<float>());

  nn::Linear nb(5, 4, {.bias = false, .activation = Activation::GELUTanh});
  EXPECT_FALSE(nb.bias.defined());
  EXPECT_EQ(nb.named_parameters().size(), 1u);
  expect_close(nb(x), gelu(linear(x, nb.weight), GeluApproximate::Tanh).to_vector<double>(), 1e-6, 1e-6);
  VOLT_EXPECT_ERROR(nb(zeros({2, 4})), "in_features=5");
}

TEST(Layers, Conv2dPoolFlattenShapes) {
  manual_seed(0);
  nn::Conv2d c(3, 8, 3, 1, 1);
  EXPECT_EQ(c.weight.shape(), (Shape{8, 3, 3, 3}));
  const double bound = 1.0 / std::sqrt(27.0);
  auto [lo, hi] = min_max(c.weight);
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  Tensor x = randn({2, 3, 8, 8});
  Tensor y = c(x);
  EXPECT_EQ(y.shape(), (Shape{2, 8, 8, 8}));
  nn::MaxPool2d mp(2);
  nn::AvgPool2d ap(2, 2);
  EXPECT_EQ(mp(y).shape(), (Shape{2, 8, 4, 4}));
  EXPECT_EQ(ap(y).shape(), (Shape{2, 8, 4, 4}));
  nn::Flatten f;
  EXPECT_EQ(f(mp(y)).shape(), (Shape{2, 128}));
  Tensor m = from_vector<float>({1, 5, 2, 0, 3, 4, 8, 7, 6}, {1, 1, 3, 3});
  expect_close(nn::MaxPool2d(2, 1)(m), {5, 5, 8, 7});
  expect_close(nn::AvgPool2d(2, 1)(m), {2.25, 3.5, 4.5, 5});
}

TEST(Layers, BatchNormTrainEval) {
  nn::BatchNorm1d bn(2);
  EXPECT_EQ(bn.named_buffers().size(), 3u);
  Tensor x = from_vector<float>({1, 10, 3, 20, 5, 30}, {3, 2});
  Tensor y = bn(x);
  // Batch stats: channel 0 mean 3 var(biased) 8/3; normalised to (-1.2247, 0, 1.2247).
  const double s0 = 1.0 / std::sqrt(8.0 / 3 + 1e-5);
  expect_close(y.select(1, 0), {-2 * s0, 0, 2 * s0}, 1e-4);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  // running = 0.9 * init + 0.1 * batch (unbiased variance 4 and 100).
  expect_close(bn.running_mean, {0.3, 2.0});
  expect_close(bn.running_var, {0.9 + 0.4, 0.9 + 10.0});
  bn.eval();
  Tensor ye = bn(x);
  expect_close(ye.select(1, 0), {(1 - 0.3) / std::sqrt(1.3 + 1e-5), (3 - 0.3) / std::sqrt(1.3 + 1e-5),
                                 (5 - 0.3) / std::sqrt(1.3 + 1e-5)}, 1e-4);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  nn::BatchNorm2d bn2(3);
  EXPECT_EQ(bn2(randn({2, 3, 4, 4})).shape(), (Shape{2, 3, 4, 4}));
  VOLT_EXPECT_ERROR(bn2(randn({2, 4, 4, 4})), "3 channels");
}

TEST(Layers, DropoutActivationsEmbedding) {
  nn::Dropout d(0.5);
  Tensor x = ones({1000});
  manual_seed(5);
  auto v = d(x).to_vector<double>();
  int zeros_n = 0;
  for (double e : v) {
    EXPECT_TRUE(e == 0.0 || e == 2.0);
    zeros_n += e == 0.0;
  }
  EXPECT_GT(zeros_n, 400);
  EXPECT_LT(zeros_n, 600);
  d.eval();
  expect_close(d(from_vector<float>({1, 2})), {1, 2});
  VOLT_EXPECT_ERROR(nn::Dropout(1.5), "p must be");

  Tensor a = from_vector<float>({-1, 0, 2});
  expect_close(nn::ReLU()(a), {0, 0, 2});
  expect_close(nn::Tanh()(a), {std::tanh(-1.0), 0, std::tanh(2.0)});
  expect_close(nn::Sigmoid()(a), {1 / (1 + std::exp(1.0)), 0.5, 1 / (1 + std::exp(-2.0))});
  expect_close(nn::GELU()(a), {-0.15865525393145707, 0, 1.9544997361036416});

  manual_seed(9);
  nn::Embedding e(10, 4);
  Tensor idx = from_vector<int64_t>({3, 3, 7}, {3});
  Tensor out = e(idx);
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  auto w = e.weight.to_vector<double>();
  auto o = out.to_vector<double>();
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(o[j], w[3 * 4 + j]);
    EXPECT_EQ(o[8 + j], w[7 * 4 + j]);
  }
}

TEST(Layers, InputGradientsMatchFiniteDifferencesInF64) {
  using volt::testing::expect_gradients_match;
  using volt::testing::rand_f64;
  manual_seed(21);
  nn::Linear l(4, 3);
  l.to(DType::f64);
  // Non-contiguous input: a transposed (4, 5) tensor.
  Tensor xt = rand_f64({4, 5}, 1).t().set_requires_grad();
  ASSERT_FALSE(xt.is_contiguous());
  expect_gradients_match([&](const std::vector<Tensor>& in) { return l(in[0]); }, {xt});

  nn::Conv2d c(2, 3, 3, 1, 1);
  c.to(DType::f64);
  Tensor xc = rand_f64({1, 2, 4, 4}, 2).set_requires_grad();
  expect_gradients_match([&](const std::vector<Tensor>& in) { return c(in[0]); }, {xc});

  nn::BatchNorm1d bn(3);
  bn.to(DType::f64);
  Tensor xb = rand_f64({5, 3}, 3).set_requires_grad();
  // Running-stat updates do not affect the output in training mode, so repeated calls are consistent.
  expect_gradients_match([&](const std::vector<Tensor>& in) { return bn(in[0]); }, {xb}, 1e-6, 1e-5, 1e-4);
  EXPECT_EQ(bn.running_mean.dtype(), DType::f64);
}
