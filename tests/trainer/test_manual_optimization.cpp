// Manual optimisation: automatic_optimization = false, optimizers(), manual_backward, toggle_model.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/trainer/manual_optimizer.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// Two parameter sets, two SGD optimizers, each stepped inside its own toggle_model scope (GAN-style).
struct TwoOptModule : TrainModule {
  Tensor a, b;  // (3), (3)
  std::vector<bool> b_frozen_in_a_scope, a_frozen_in_b_scope;
  TwoOptModule() {
    a = register_parameter("a", from_vector<float>({1, 2, 3}));
    b = register_parameter("b", from_vector<float>({-1, 0, 1}));
    automatic_optimization = false;
  }
  Tensor training_step(const Batch& batch, int64_t) override {
    auto opts = optimizers();
    Tensor x = batch.input.mean({0});  // (3)
    {
      auto t = opts[0].toggle_model();
      b_frozen_in_a_scope.push_back(!b.requires_grad());
      manual_backward(((a - x) * (a - x)).sum() + (a * b).sum());
      opts[0].step();
      opts[0].zero_grad();
    }
    {
      auto t = opts[1].toggle_model();
      a_frozen_in_b_scope.push_back(!a.requires_grad());
      manual_backward(((b + x) * (b + x)).sum());
      opts[1].step();
      opts[1].zero_grad();
    }
    return Tensor();
  }
  Optimizers configure_optimizers() override {
    Optimizers o;
    o.optimizers.push_back(std::make_shared<optim::SGD>(std::vector<Tensor>{a}, optim::SGDOptions{.lr = 0.1}));
    o.optimizers.push_back(std::make_shared<optim::SGD>(std::vector<Tensor>{b}, optim::SGDOptions{.lr = 0.05}));
    return o;
  }
};

}  // namespace

TEST(ManualOptimization, TwoOptimizersToggledPerStepMatchHandComputation) {
  ScratchDir dir("manual");
  TwoOptModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  auto ds = std::make_shared<data::TensorDataset>(from_vector<float>({1, 1, 1, 3, 3, 3, 0, 2, 4, 2, 2, 2}, {4, 3}),
                                                  from_vector<int64_t>({0, 0, 0, 0}));
  t.fit(m, std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2}));
  EXPECT_EQ(t.global_step(), 4);  // two batches x two optimizer steps
  EXPECT_EQ(m.b_frozen_in_a_scope, (std::vector<bool>{true, true}));
  EXPECT_EQ(m.a_frozen_in_b_scope, (std::vector<bool>{true, true}));
  EXPECT_TRUE(m.a.requires_grad() && m.b.requires_grad()) << "toggle_model must restore requires_grad";
  // Hand computation: batch means x0 = (2,2,2), x1 = (1,2,3).
  std::vector<double> a{1, 2, 3}, b{-1, 0, 1};
  for (std::vector<double> x : {std::vector<double>{2, 2, 2}, std::vector<double>{1, 2, 3}}) {
    for (int i = 0; i < 3; ++i) a[i] -= 0.1 * (2 * (a[i] - x[i]) + b[i]);
    for (int i = 0; i < 3; ++i) b[i] -= 0.05 * (2 * (b[i] + x[i]));
  }
  volt::testing::expect_close(m.a, a, 1e-5);
  volt::testing::expect_close(m.b, b, 1e-5);
}

TEST(ManualOptimization, MisuseIsAClearError) {
  ScratchDir dir("manual_err");
  {
    TwoOptModule m;
    auto o = quiet(dir.str());
    o.accumulate_grad_batches = 2;
    Trainer t(o);
    auto ds = std::make_shared<data::TensorDataset>(zeros({4, 3}), zeros({4}, DType::i64));
    VOLT_EXPECT_ERROR(t.fit(m, std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2})),
                      "accumulate_grad_batches=2", "manual optimisation");
  }
  {
    TinyModule m;  // automatic optimisation
    VOLT_EXPECT_ERROR(m.manual_backward(ones({1}).set_requires_grad()), "not attached");
  }
}
