// nn::SiLU, nn::GELU("tanh"), nn::LayerNorm, nn::GroupNorm and nn::Embedding's padding_idx: parameters registered
// under the expected names, initial values, forward against the functional op, training steps and errors.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::rand_f64;

namespace {

std::vector<std::string> names(const nn::StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [name, t] : sd) out.push_back(name);
  return out;
}

}  // namespace

TEST(NormLayers, ActivationModules) {
  Tensor a = from_vector<float>({-2, 0, 1});
  expect_close(nn::SiLU()(a), {-0.2384058440442351, 0.0, 0.7310585786300049});
  expect_close(nn::GELU("tanh")(a), gelu(a, GeluApproximate::Tanh).to_vector<double>(), 0);
  expect_close(nn::GELU(GeluApproximate::Tanh)(a), gelu(a, "tanh").to_vector<double>(), 0);
  EXPECT_EQ(nn::GELU("tanh").extra_repr(), "approximate='tanh'");
  EXPECT_EQ(nn::SiLU().type_name(), "SiLU");
  EXPECT_TRUE(nn::SiLU().parameters().empty());
  VOLT_EXPECT_ERROR(nn::GELU("erf"), "approximate", "\"erf\"");
}

TEST(NormLayers, LayerNormParametersAndForward) {
  nn::LayerNorm ln({3, 4});
  EXPECT_EQ(names(ln.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names(ln.state_dict()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ln.weight.shape(), (Shape{3, 4}));
  EXPECT_TRUE(ln.weight.requires_grad());
  expect_close(ln.weight, std::vector<double>(12, 1.0), 0);
  expect_close(ln.bias, std::vector<double>(12, 0.0), 0);
  EXPECT_EQ(ln.num_parameters(), 24);

  Tensor x = rand_f64({2, 3, 4}, 1).to(DType::f32);
  {
    NoGradGuard ng;
    ln.weight.copy_(rand_f64({3, 4}, 2));
    ln.bias.copy_(rand_f64({3, 4}, 3));
  }
  expect_close(ln(x), layer_norm(x, {3, 4}, ln.weight, ln.bias, 1e-5).to_vector<double>(), 0);

  // One-dim form; without affine there are no parameters.
  nn::LayerNorm plain({8}, 1e-6, false);
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_EQ(plain.normalized_shape, (Shape{8}));
  nn::LayerNorm no_bias({8}, 1e-5, true, false);
  EXPECT_EQ(names(no_bias.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(no_bias.extra_repr(), "(8,), eps=1e-05, elementwise_affine=true, bias=false");
}

TEST(NormLayers, LayerNormTrainsItsParameters) {
  manual_seed(4);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(4, 6));
  auto ln = model.push_back(std::make_shared<nn::LayerNorm>(6));
  model.push_back(std::make_shared<nn::SiLU>());
  model.push_back(std::make_shared<nn::Linear>(6, 1));
  const std::vector<std::string> expected = {"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"};
  EXPECT_EQ(names(model.named_parameters()), expected);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  Tensor x = rand_f64({16, 4}, 5).to(DType::f32), target = rand_f64({16, 1}, 6).to(DType::f32);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(model(x), target);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first);
  EXPECT_NE(ln->weight.to_vector<double>(), std::vector<double>(6, 1.0));  // the optimizer updated it
}

TEST(NormLayers, LayerNormStateDictRoundTripAndErrors) {
  nn::LayerNorm a(5), b(5);
  {
    NoGradGuard ng;
    a.weight.copy_(rand_f64({5}, 7));
  }
  b.load_state_dict(a.state_dict());
  expect_close(b.weight, a.weight.to_vector<double>(), 0);
  VOLT_EXPECT_ERROR(nn::LayerNorm(Shape{}), "LayerNorm", "normalized_shape is empty");
  VOLT_EXPECT_ERROR(nn::LayerNorm(Shape{3, 0}), "LayerNorm", "(3, 0)", "non-positive");
  VOLT_EXPECT_ERROR(a(zeros({2, 4})), "layer_norm", "x has shape (2, 4)", "normalized_shape is (5,)");
}

TEST(NormLayers, GroupNormParametersForwardAndErrors) {
  nn::GroupNorm gn(2, 6);
  EXPECT_EQ(names(gn.state_dict()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(gn.weight.shape(), (Shape{6}));
  expect_close(gn.weight, std::vector<double>(6, 1.0), 0);
  expect_close(gn.bias, std::vector<double>(6, 0.0), 0);
  Tensor x = rand_f64({3, 6, 2, 2}, 8).to(DType::f32);
  expect_close(gn(x), group_norm(x, 2, gn.weight, gn.bias).to_vector<double>(), 0);
  EXPECT_EQ(gn.extra_repr(), "2, 6, eps=1e-05, affine=true");
  EXPECT_TRUE(nn::GroupNorm(3, 6, 1e-5, false).parameters().empty());

  // Gradients reach the module's parameters.
  gn.to(DType::f64);
  volt::testing::expect_gradients_match([&](const std::vector<Tensor>& in) { return gn(in[0]); },
                                        {rand_f64({2, 6, 3}, 9).set_requires_grad()}, 1e-6, 1e-6, 1e-5);
  gn.zero_grad();
  sum(gn(rand_f64({2, 6, 3}, 10))).backward();
  expect_close(gn.bias.grad(), std::vector<double>(6, 6.0), 1e-12);  // 2 samples x 3 positions

  VOLT_EXPECT_ERROR(nn::GroupNorm(4, 6), "GroupNorm", "num_channels (6)", "divisible by num_groups (4)");
  VOLT_EXPECT_ERROR(nn::GroupNorm(0, 6), "GroupNorm", "num_groups must be positive");
  VOLT_EXPECT_ERROR(gn(zeros({2, 4, 3}, DType::f64)), "GroupNorm::forward", "6 channels", "(2, 4, 3)");
}

TEST(NormLayers, EmbeddingPaddingRowStartsZeroAndStaysZero) {
  manual_seed(11);
  nn::Embedding e(6, 3, 2);
  ASSERT_TRUE(e.padding_idx.has_value());
  EXPECT_EQ(*e.padding_idx, 2);
  EXPECT_EQ(e.extra_repr(), "6, 3, padding_idx=2");
  EXPECT_EQ(names(e.state_dict()), (std::vector<std::string>{"weight"}));
  expect_close(e.weight.select(0, 2), {0, 0, 0}, 0);
  EXPECT_NE(e.weight.select(0, 1).to_vector<double>(), (std::vector<double>{0, 0, 0}));

  optim::SGD opt(e.parameters(), {.lr = 0.5});
  Tensor idx = from_vector<int64_t>({2, 1, 2, 0, 2}, {5});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sum(square(e(idx))).backward();
    expect_close(e.weight.grad().select(0, 2), {0, 0, 0}, 0);
    opt.step();
  }
  expect_close(e.weight.select(0, 2), {0, 0, 0}, 0);
  expect_close(e(idx).select(0, 0), {0, 0, 0}, 0);  // padding lookups give zeros

  nn::Embedding last(4, 2, -1);  // PyTorch's meaning: the last row
  EXPECT_EQ(*last.padding_idx, 3);
  expect_close(last.weight.select(0, 3), {0, 0}, 0);
  EXPECT_FALSE(nn::Embedding(4, 2).padding_idx.has_value());
  VOLT_EXPECT_ERROR(nn::Embedding(4, 2, 4), "Embedding", "padding_idx 4", "num_embeddings 4");
  VOLT_EXPECT_ERROR(e(from_vector<int64_t>({1, 6}, {2})), "embedding", "value 6", "size 6");
  // int32 indices work too.
  expect_close(e(from_vector<int64_t>({1}, {1}).to(DType::i32)), e.weight.select(0, 1).to_vector<double>(), 0);
}
