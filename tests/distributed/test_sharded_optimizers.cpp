// RMSprop, Adagrad and Lion (nn/optimizers.h) under the sharded strategies (mpirun -np 2 / 3, and alone as one
// rank): zero1, zero2 and fsdp keep any optimizer's per-parameter state on their flat shards, so after two
// epochs every rank's parameters equal DDP's, to 1e-12 in f64 (reductions round differently: see test_zero.cpp),
// and each rank keeps the optimizer state of its shards only.
#include <gtest/gtest.h>

#include <volt/distributed/process_group.h>
#include <volt/nn/optimizers.h>

#include "distributed/zero_test_module.h"

using namespace volt;

namespace {

int world() { return dist::default_group().world_size(); }

// ZeroMlp's two parameter groups (20 and 9 values) under one of the three optimizers, every option on.
struct OptMlp : test::ZeroMlp {
  std::string kind;
  int64_t state_values = 0;  // this rank's optimizer state (step counts excluded), after the last batch
  std::shared_ptr<optim::Optimizer> opt;
  Optimizers configure_optimizers() override {
    std::vector<optim::ParamGroup> groups = {{{w1, b1}, 0.02, {}}, {{w2, b2, skip}, 0.01, {}}};
    if (kind == "rmsprop")
      opt = std::make_shared<optim::RMSprop>(groups, optim::RMSpropOptions{.alpha = 0.9, .weight_decay = 0.01,
                                                                           .momentum = 0.5, .centered = true});
    else if (kind == "adagrad")
      opt = std::make_shared<optim::Adagrad>(groups, optim::AdagradOptions{.lr_decay = 0.1, .weight_decay = 0.01,
                                                                           .initial_accumulator_value = 0.1});
    else
      opt = std::make_shared<optim::Lion>(groups, optim::LionOptions{.weight_decay = 0.1});
    return opt;
  }
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    state_values = 0;
    for (auto& [k, t] : opt->state_dict())
      if (k.size() < 5 || k.compare(k.size() - 5, 5, ".step") != 0) state_values += t.numel();
  }
};

struct Result {
  std::vector<std::vector<double>> params;
  int64_t state_values = 0;
  std::string strategy;
};

Result run(const std::string& strategy, const std::string& kind) {
  TrainerOptions o = test::zero_options(strategy);
  o.max_epochs = 2;
  o.seed = 77;
  Trainer trainer(o);
  OptMlp m;
  m.kind = kind;
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24),
                                                   data::DataLoaderOptions{.batch_size = 2, .shuffle = true, .seed = 5});
  trainer.fit(m, loader);
  return {test::parameter_values(m), m.state_values, trainer.strategy().name()};
}

void check_parity(const std::string& kind, int64_t buffers) {
  const Result ddp = run("ddp", kind);
  EXPECT_EQ(ddp.state_values, buffers * 29);
  EXPECT_GT(test::max_abs_diff(ddp.params, test::parameter_values(*std::make_unique<test::ZeroMlp>())), 1e-3)
      << "trained";
  for (const std::string s : {"zero1", "zero2", "fsdp"}) {
    SCOPED_TRACE(s);
    const Result r = run(s, kind);
    ASSERT_EQ(r.strategy, s);
    EXPECT_LE(test::max_abs_diff(r.params, ddp.params), 1e-12) << "max |" << s << " - ddp| over the parameters";
    if (world() > 1) EXPECT_LT(r.state_values, ddp.state_values) << "each rank keeps its shards' state only";
  }
}

}  // namespace

TEST(ShardedOptimizers, RMSpropMatchesDdp) { check_parity("rmsprop", 3); }
TEST(ShardedOptimizers, AdagradMatchesDdp) { check_parity("adagrad", 1); }
TEST(ShardedOptimizers, LionMatchesDdp) { check_parity("lion", 1); }
