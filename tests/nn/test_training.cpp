// End to end: a small MLP made of nn layers trained with the fused optimizers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <cstdlib>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>

using namespace volt;

namespace {
struct Mlp : nn::UnaryModule {
  nn::Linear l1, l2;
  nn::ReLU act;
  Mlp(int64_t in, int64_t hidden, int64_t out) : l1(in, hidden), l2(hidden, out) {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  Tensor forward(const Tensor& x) override { return l2(act(l1(x.flatten(1)))); }
};
}  // namespace

TEST(Training, AdamReducesCrossEntropyOnFixedBatch) {
  manual_seed(11);
  Mlp m(20, 32, 5);
  Tensor x = randn({16, 20});
  Tensor y = from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0}, {16});
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int it = 0; it < 60; ++it) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(m(x), y);
    loss.backward();
    opt.step();
    if (it == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_NEAR(first, std::log(5.0), 0.5);
  EXPECT_LT(last, 0.1 * first);
}

TEST(Training, SgdMomentumReducesMseOfSequential) {
  manual_seed(12);
  nn::Sequential net{std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(16, 1)};
  Tensor x = randn({32, 4});
  Tensor target = (x.select(1, 0) * 0.5 - x.select(1, 2)).unsqueeze(1);
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  double first = 0, last = 0;
  for (int it = 0; it < 100; ++it) {
    net.zero_grad();
    Tensor loss = nn::mse_loss(net(x), target);
    loss.backward();
    nn::clip_grad_norm_(net.parameters(), 5.0);
    opt.step();
    if (it == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_LT(last, 0.05 * first);
}

TEST(Training, SmallCnnWithBatchNormLearns) {
  manual_seed(13);
  nn::Sequential net{std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4),
                     std::make_shared<nn::ReLU>(),         std::make_shared<nn::MaxPool2d>(2),
                     std::make_shared<nn::Flatten>(),      std::make_shared<nn::Dropout>(0.1),
                     std::make_shared<nn::Linear>(4 * 4 * 4, 3)};
  EXPECT_EQ(net.named_parameters()[2].first, "1.weight");
  EXPECT_EQ(net.named_buffers()[0].first, "1.running_mean");
  Tensor x = randn({12, 1, 8, 8});
  Tensor y = from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, {12});
  optim::AdamW opt(net.parameters(), {.lr = 2e-2});
  optim::CosineAnnealingLR sched(opt, 40);
  double first = 0, last = 0;
  for (int it = 0; it < 40; ++it) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    sched.step();
    if (it == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_LT(last, 0.3 * first);
  auto& bn = static_cast<nn::BatchNorm2d&>(net[1]);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 40);
  net.eval();
  Tensor a = net(x), b = net(x);  // eval: deterministic (no dropout, running stats)
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

TEST(Training, OptimizerStateFollowsModuleDtype) {
  manual_seed(14);
  Mlp m(3, 4, 2);
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  Tensor x = randn({5, 3});
  auto step = [&](DType dt) {
    opt.zero_grad();
    m(x.to(dt)).sum().backward();
    opt.step();
  };
  step(DType::f32);
  m.to(DType::f64);
  step(DType::f64);
  auto sd = opt.state_dict();
  EXPECT_EQ(sd[1].first, "state.0.0.exp_avg");
  EXPECT_EQ(sd[1].second.dtype(), DType::f64);
  EXPECT_EQ(m.l1.weight.dtype(), DType::f64);
  EXPECT_EQ(opt.step_count(0, 0), 2);
}
