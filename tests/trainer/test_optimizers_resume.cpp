// RMSprop, Adagrad and Lion (nn/optimizers.h) through the Trainer's checkpoints: two epochs straight equal one
// epoch, a checkpoint, a resume and one more epoch, bit for bit (state tensors, step counts and the scheduled lr
// restored), as tests/trainer/test_checkpoint_resume.cpp checks for Adam.
#include <cstring>

#include <volt/nn/optimizers.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// `make(params)` and a step StepLR, a shuffled loader.
struct OptModule : TinyModule {
  explicit OptModule(std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)> make) {
    make_optimizers = [make](TinyModule& mm) {
      auto opt = make(mm.parameters());
      Optimizers o(opt);
      o.schedulers.push_back({std::make_shared<optim::StepLR>(*opt, 3, 0.7), SchedulerInterval::step, 1});
      return o;
    };
  }
};

TrainerOptions opts(const std::string& dir, int64_t epochs) {
  auto o = quiet(dir);
  o.max_epochs = epochs;
  o.seed = 99;
  return o;
}

void expect_bit_equal(const Tensor& a, const Tensor& b, const char* what) {
  auto x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what;
}

void check_resume(const std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)>& make, const char* tag) {
  SCOPED_TRACE(tag);
  ScratchDir dir(std::string("resume_") + tag);
  OptModule straight(make);
  double straight_lr = 0;
  {
    Trainer t(opts(dir.str(), 2));
    t.fit(straight, make_loader(10, 3, /*shuffle=*/true));
    EXPECT_EQ(t.global_step(), 8);
    straight_lr = t.optimizers()[0]->param_groups()[0].lr;
  }
  const std::string ck = (dir.path / "ck").string();
  {
    OptModule first(make);
    auto o = opts(dir.str(), 1);
    o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck})};
    Trainer t(o);
    t.fit(first, make_loader(10, 3, true));
  }
  OptModule resumed(make);
  Trainer t2(opts(dir.str(), 2));
  t2.fit(resumed, make_loader(10, 3, true), nullptr, ck + "/epoch=0-step=4.json");
  EXPECT_EQ(t2.global_step(), 8);
  EXPECT_EQ(resumed.train_steps, 4);  // only the second epoch ran
  EXPECT_EQ(t2.optimizers()[0]->type_name(), tag);
  EXPECT_EQ(t2.optimizers()[0]->step_count(0, 0), 8);
  expect_bit_equal(straight.w, resumed.w, "w");
  expect_bit_equal(straight.b, resumed.b, "b");
  EXPECT_EQ(t2.optimizers()[0]->param_groups()[0].lr, straight_lr);
}

}  // namespace

TEST(OptimizersResume, RMSpropCenteredWithMomentum) {
  check_resume([](std::vector<Tensor> p) {
    return std::make_shared<optim::RMSprop>(std::move(p), optim::RMSpropOptions{
        .lr = 0.02, .alpha = 0.9, .weight_decay = 0.01, .momentum = 0.5, .centered = true});
  }, "RMSprop");
}

TEST(OptimizersResume, AdagradWithLrDecay) {
  check_resume([](std::vector<Tensor> p) {
    return std::make_shared<optim::Adagrad>(std::move(p), optim::AdagradOptions{
        .lr = 0.2, .lr_decay = 0.1, .weight_decay = 0.01, .initial_accumulator_value = 0.1});
  }, "Adagrad");
}

TEST(OptimizersResume, LionWithWeightDecay) {
  check_resume([](std::vector<Tensor> p) {
    return std::make_shared<optim::Lion>(std::move(p), optim::LionOptions{.lr = 0.01, .weight_decay = 0.1});
  }, "Lion");
}
