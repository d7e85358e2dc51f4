// toggle_optimizer under ZeRO (mpirun -np 2 / 3, and alone): a GAN-style module with a generator and a
// discriminator optimizer, each step toggled to one of them, reaches DDP's parameters under zero1 and zero2 in
// f64; a toggled-off parameter receives no gradient (the other optimizer's parameters, or under ZeRO its shards,
// hold no .grad after the backward), and the sharded reducer does not report it as unused.
#include <gtest/gtest.h>

#include <volt/distributed/process_group.h>
#include <volt/distributed/sharded_reducer.h>

#include "distributed/zero_test_module.h"

using namespace volt;

namespace {

dist::ProcessGroup& pg() { return dist::default_group(); }

struct GanModule : TrainModule {
  Tensor g_w, g_b, d_w, d_b, d_v;  // generator (3, 4), (4); discriminator (4, 5), (5), (5, 1)
  Tensor mix;                      // (3, 4) fixed: the "real" samples are tanh(x mix)
  int64_t foreign_grads = 0;       // gradients seen on the other optimizer's tensors right after a backward
  int64_t own_grads = 0;           // and on the stepping optimizer's
  GanModule() {
    automatic_optimization = false;
    g_w = register_parameter("g_w", cast(rand_with_seed({3, 4}, 41, 0), DType::f64) - 0.5);
    g_b = register_parameter("g_b", zeros({4}, DType::f64));
    d_w = register_parameter("d_w", cast(rand_with_seed({4, 5}, 42, 0), DType::f64) - 0.5);
    d_b = register_parameter("d_b", cast(rand_with_seed({5}, 43, 0), DType::f64) * 0.1);
    d_v = register_parameter("d_v", cast(rand_with_seed({5, 1}, 44, 0), DType::f64) - 0.5);
    mix = cast(rand_with_seed({3, 4}, 45, 0), DType::f64) - 0.5;
  }
  std::string type_name() const override { return "GanModule"; }
  Tensor generate(const Tensor& x) { return tanh(matmul(x, g_w) + g_b); }
  Tensor discriminate(const Tensor& h) { return matmul(tanh(matmul(h, d_w) + d_b), d_v).reshape({-1}); }

  void count_grads(ManualOptimizer& mine, ManualOptimizer& other) {
    for (auto& g : other.optimizer().param_groups())
      for (auto& p : g.params) foreign_grads += p.grad().defined() ? 1 : 0;
    for (auto& g : mine.optimizer().param_groups())
      for (auto& p : g.params) own_grads += p.grad().defined() ? 1 : 0;
  }

  Tensor training_step(const Batch& b, int64_t) override {
    auto opts = optimizers();
    Tensor g_loss, d_loss;
    {
      auto t = opts[0].toggle_model();
      g_loss = (discriminate(generate(b.input)) - 1.0).pow(2.0).mean();
      manual_backward(g_loss);
      count_grads(opts[0], opts[1]);
      opts[0].step();
      opts[0].zero_grad();
    }
    {
      auto t = opts[1].toggle_model();
      Tensor real = tanh(matmul(b.input, mix));
      Tensor fake = generate(b.input).detach();
      d_loss = (discriminate(real) - 1.0).pow(2.0).mean() + discriminate(fake).pow(2.0).mean();
      manual_backward(d_loss);
      count_grads(opts[1], opts[0]);
      opts[1].step();
      opts[1].zero_grad();
    }
    return (g_loss + d_loss).detach();
  }
  Optimizers configure_optimizers() override {
    Optimizers o;
    o.optimizers.push_back(std::make_shared<optim::Adam>(std::vector<Tensor>{g_w, g_b}, optim::AdamOptions{.lr = 0.02}));
    o.optimizers.push_back(
        std::make_shared<optim::Adam>(std::vector<Tensor>{d_w, d_b, d_v}, optim::AdamOptions{.lr = 0.01}));
    return o;
  }
};

struct GanRun {
  std::vector<std::vector<double>> params;
  int64_t foreign_grads = 0, own_grads = 0, steps = 0;
};

GanRun run_gan(const std::string& strategy) {
  TrainerOptions o = test::zero_options(strategy);
  o.max_epochs = 2;
  Trainer trainer(o);
  GanModule m;
  // A global batch of 12 at any world size.
  const int64_t batch = 12 / trainer.strategy().world_size();
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = batch});
  trainer.fit(m, loader);
  return {test::parameter_values(m), m.foreign_grads, m.own_grads, trainer.global_step()};
}

TEST(ZeroToggle, GanWithTwoToggledOptimizersMatchesDdp) {
  if (12 % pg().world_size() != 0) GTEST_SKIP() << "the global batch of 12 needs a world size dividing it";
  const GanRun ddp = run_gan("ddp");
  EXPECT_EQ(ddp.steps, 2 * 2 * 2);  // 2 epochs x 2 batches x 2 optimizers
  EXPECT_EQ(ddp.foreign_grads, 0);
  EXPECT_GT(ddp.own_grads, 0);
  // Both halves trained.
  const auto start = test::parameter_values(*std::make_unique<GanModule>());
  for (size_t i = 0; i < start.size(); ++i)
    EXPECT_GT(test::max_abs_diff({ddp.params[i]}, {start[i]}), 1e-4) << "parameter " << i << " did not change";
  for (const std::string s : {"zero1", "zero2"}) {
    SCOPED_TRACE(s);
    const GanRun z = run_gan(s);
    EXPECT_EQ(z.steps, ddp.steps);
    EXPECT_EQ(z.foreign_grads, 0) << "the toggled-off optimizer's shards received a gradient";
    EXPECT_EQ(z.own_grads, 4 * 2);  // one shard per bucket: each optimizer is one group, one bucket
    EXPECT_LE(test::max_abs_diff(z.params, ddp.params), 1e-12);
  }
}

TEST(ZeroToggle, ReducerSkipsFrozenParametersButStillNamesUnusedOnes) {
  for (auto stage : {dist::ShardedReducer::Stage::one, dist::ShardedReducer::Stage::two}) {
    Tensor a = from_vector<double>({1, 2, 3}).set_requires_grad(true);
    Tensor b = from_vector<double>({4, 5}).set_requires_grad(true);
    Tensor c = from_vector<double>({6}).set_requires_grad(true);
    // a and b share a bucket (owner 0), c has its own (owner 1).
    dist::ShardedReducer red(pg(), {{"a", a, 0}, {"b", b, 0}, {"c", c, 1}}, stage);
    ASSERT_EQ(red.buckets().size(), 2u);
    // b and c toggled off: a's gradient is reduced with zeros in b's place; c's bucket is not reduced.
    b.set_requires_grad(false);
    c.set_requires_grad(false);
    ((a * a).sum() * static_cast<double>(pg().rank() + 1)).backward();
    EXPECT_NO_THROW(red.finalize());
    const double avg = (pg().world_size() + 1) / 2.0;
    const std::vector<double> flat = {0, 0, 2 * 1 * avg, 2 * 2 * avg, 2 * 3 * avg};  // reverse order: b, a
    const auto& bk = red.buckets()[1];
    ASSERT_EQ(bk.numel, 5);
    std::vector<double> g = bk.shard.grad().to_vector<double>();
    for (int64_t k = 0; k < bk.chunk; ++k) {
      const int64_t at = pg().rank() * bk.chunk + k;
      EXPECT_DOUBLE_EQ(g[k], at < 5 ? flat[at] : 0.0) << "element " << at;
    }
    EXPECT_FALSE(red.buckets()[0].shard.grad().defined()) << "a bucket frozen whole keeps no gradient";
    EXPECT_FALSE(b.grad().defined());
    EXPECT_FALSE(c.grad().defined());
    // Toggled back on: a parameter that requires grad and gets none is still an error naming it.
    b.set_requires_grad(true);
    c.set_requires_grad(true);
    ((a * a).sum() + b.sum()).backward();
    try {
      red.finalize();
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'c'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
