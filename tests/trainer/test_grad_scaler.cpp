// GradScaler: scaling, unscaling, skipped steps on inf/NaN, backoff and growth.
#include <limits>

#include <volt/trainer/precision/grad_scaler.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

TEST(GradScaler, ScalesUnscalesAndSteps) {
  Tensor p = from_vector<float>({1.0f, 2.0f}).set_requires_grad();
  optim::SGD opt({p}, {.lr = 0.5});
  GradScaler gs({.init_scale = 8.0});
  SingleDeviceStrategy s;
  Tensor loss = (p * p).sum();
  Tensor scaled = gs.scale_loss(loss);
  EXPECT_DOUBLE_EQ(scaled.item(), 8.0 * 5.0);
  scaled.backward();
  EXPECT_EQ(values(p.grad()), (std::vector<float>{16.0f, 32.0f}));
  EXPECT_FALSE(gs.unscale_(opt, s));
  EXPECT_EQ(values(p.grad()), (std::vector<float>{2.0f, 4.0f}));
  EXPECT_TRUE(gs.step(opt, s));  // no second unscale
  EXPECT_EQ(values(p), (std::vector<float>{0.0f, 0.0f}));
  gs.update();
  EXPECT_DOUBLE_EQ(gs.scale(), 8.0);
}

TEST(GradScaler, SkipsNonFiniteAndBacksOffThenGrows) {
  Tensor p = from_vector<float>({1.0f}).set_requires_grad();
  optim::SGD opt({p}, {.lr = 0.5});
  GradScaler gs({.init_scale = 4.0, .growth_interval = 2});
  SingleDeviceStrategy s;
  p.set_grad(from_vector<float>({std::numeric_limits<float>::infinity()}));
  EXPECT_FALSE(gs.step(opt, s));
  EXPECT_EQ(values(p)[0], 1.0f);  // skipped
  gs.update();
  EXPECT_DOUBLE_EQ(gs.scale(), 2.0);
  EXPECT_EQ(gs.skipped_steps(), 1);
  for (int i = 0; i < 2; ++i) {
    p.set_grad(from_vector<float>({2.0f}));
    EXPECT_TRUE(gs.step(opt, s));
    gs.update();
  }
  EXPECT_DOUBLE_EQ(gs.scale(), 4.0);  // grew after 2 clean steps
  p.set_grad(from_vector<float>({std::nanf("")}));
  EXPECT_FALSE(gs.step(opt, s));
  gs.update();
  EXPECT_DOUBLE_EQ(gs.scale(), 2.0);
  GradScaler copy;
  copy.load_state_dict(gs.state_dict());
  EXPECT_DOUBLE_EQ(copy.scale(), 2.0);
  VOLT_EXPECT_ERROR(GradScaler({.backoff_factor = 2.0}), "backoff_factor");
}
