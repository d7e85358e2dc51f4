// LR schedulers: lr sequences against closed forms (and a few pinned PyTorch values).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>

using namespace volt;

namespace {
Tensor leaf() { return zeros({2}).set_requires_grad(); }
constexpr double kPi = std::numbers::pi;
}  // namespace

TEST(LRScheduler, StepLR) {
  Tensor p = leaf();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::StepLR s(opt, 3, 0.5);
  for (int e = 0; e < 10; ++e) {
    EXPECT_EQ(s.last_epoch, e);
    EXPECT_NEAR(s.get_last_lr(), 0.1 * std::pow(0.5, e / 3), 1e-15) << "epoch " << e;
    EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr, s.get_last_lr());
    s.step();
  }
}

TEST(LRScheduler, CosineAnnealingTwoGroups) {
  Tensor a = leaf(), b = leaf();
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, 0.1, {}}, {{b}, 0.02, {}}}, {.lr = 0.1});
  optim::CosineAnnealingLR s(opt, 10, 0.001);
  for (int e = 0; e <= 12; ++e) {
    const double c = (1 + std::cos(kPi * e / 10.0)) / 2;
    EXPECT_NEAR(opt.param_groups()[0].lr, 0.001 + (0.1 - 0.001) * c, 1e-15) << e;
    EXPECT_NEAR(opt.param_groups()[1].lr, 0.001 + (0.02 - 0.001) * c, 1e-15) << e;
    s.step();
  }
}

TEST(LRScheduler, OneCycleMatchesClosedFormAndPyTorch) {
  Tensor p = leaf();
  optim::Adam opt({p}, {.lr = 123.0});  // the initial lr is replaced by max_lr / div_factor
  const int total = 10;
  optim::OneCycleLR s(opt, 1.0, total);
  auto cos_anneal = [](double a, double b, double pct) { return b + (a - b) / 2 * (std::cos(kPi * pct) + 1); };
  const double init = 1.0 / 25, fin = init / 1e4, up_end = 0.3 * total - 1;
  std::vector<double> lrs, moms;
  for (int e = 0; e < total; ++e) {
    double lr, mom;
    if (e <= up_end) {
      lr = cos_anneal(init, 1.0, e / up_end);
      mom = cos_anneal(0.95, 0.85, e / up_end);
    } else {
      double pct = (e - up_end) / (total - 1 - up_end);
      lr = cos_anneal(1.0, fin, pct);
      mom = cos_anneal(0.85, 0.95, pct);
    }
    EXPECT_NEAR(s.get_last_lr(), lr, 1e-12) << e;
    EXPECT_NEAR(opt.param_groups()[0].options.beta1.value(), mom, 1e-12) << e;
    lrs.push_back(s.get_last_lr());
    if (e + 1 < total) s.step();
  }
  // torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10) gives these.
  EXPECT_NEAR(lrs[0], 0.04, 1e-12);
  EXPECT_NEAR(lrs[1], 0.52, 1e-12);
  EXPECT_NEAR(lrs[2], 1.0, 1e-12);
  EXPECT_NEAR(lrs[3], 0.9504846320134737, 1e-12);
  EXPECT_NEAR(lrs[9], 4e-6, 1e-15);
  s.step();  // step 10 == total_steps is still allowed (PyTorch checks step > total_steps)
  VOLT_EXPECT_ERROR(s.step(), "total_steps");
}

TEST(LRScheduler, OneCycleLinearAnnealWithSgdMomentum) {
  Tensor p = leaf();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  optim::OneCycleLR s(opt, 0.5, 5, {.pct_start = 0.4, .anneal_strategy = optim::AnnealStrategy::Linear});
  // up phase ends at step 1 (0.4 * 5 - 1), down phase at 4.
  std::vector<double> expect = {0.02, 0.5, 0.5 + (0.02 / 1e4 - 0.5) / 3, 0.5 + 2 * (0.02 / 1e4 - 0.5) / 3, 0.02 / 1e4};
  for (int e = 0; e < 5; ++e) {
    EXPECT_NEAR(s.get_last_lr(), expect[e], 1e-12) << e;
    if (e < 4) s.step();
  }
  EXPECT_NEAR(opt.param_groups()[0].options.momentum.value(), 0.95, 1e-12);
}

TEST(LRScheduler, LinearWarmupConstantThenWrapped) {
  Tensor p = leaf();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::LinearWarmupLR w(opt, 4);
  for (int e = 0; e < 7; ++e) {
    EXPECT_NEAR(w.get_last_lr(), e < 4 ? 0.1 * (e + 1) / 5.0 : 0.1, 1e-15) << e;
    w.step();
  }

  Tensor q = leaf();
  optim::SGD opt2({q}, {.lr = 0.2});
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt2, 6);
  optim::LinearWarmupLR w2(opt2, 3, cosine);
  for (int e = 0; e < 10; ++e) {
    double expect = e < 3 ? 0.2 * (e + 1) / 4.0 : 0.2 * (1 + std::cos(kPi * (e - 3) / 6.0)) / 2;
    EXPECT_NEAR(opt2.param_groups()[0].lr, expect, 1e-15) << e;
    w2.step();
  }
}

TEST(LRScheduler, StateDictRestoresPosition) {
  Tensor p = leaf();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::StepLR s(opt, 2, 0.1);
  for (int i = 0; i < 5; ++i) s.step();
  auto st = s.state_dict();
  EXPECT_EQ(st.at("last_epoch"), 5);

  Tensor q = leaf();
  optim::SGD opt2({q}, {.lr = 0.1});
  optim::StepLR s2(opt2, 2, 0.1);
  s2.load_state_dict(st);
  EXPECT_EQ(s2.last_epoch, 5);
  EXPECT_NEAR(opt2.param_groups()[0].lr, 0.1 * 0.01, 1e-15);
  s.step();
  s2.step();
  EXPECT_DOUBLE_EQ(s.get_last_lr(), s2.get_last_lr());
  VOLT_EXPECT_ERROR(s2.load_state_dict({}), "last_epoch");
}

TEST(LRScheduler, DrivesOptimizerLr) {
  // SGD with no momentum: p -= lr * g, so the step taken reveals the lr in use.
  Tensor p = zeros({1}).set_requires_grad();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR s(opt, 1, 0.5);
  std::vector<double> seen;
  for (int e = 0; e < 3; ++e) {
    double before = p.item();
    p.set_grad(ones({1}));
    opt.step();
    seen.push_back(before - p.item());
    s.step();
  }
  EXPECT_EQ(seen, (std::vector<double>{1.0, 0.5, 0.25}));
}
