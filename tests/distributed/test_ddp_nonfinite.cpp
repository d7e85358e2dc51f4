// on_nonfinite_loss under DDP: a NaN loss on ONE rank makes every rank skip the same step (no rank waits in a
// gradient all-reduce the others never start), and the replicas stay identical.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <volt/data/data.h>
#include "common/ddp_test_util.h"
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/trainer/trainer.h>

using namespace volt;

namespace {

struct Regressor : TrainModule {
  Tensor w, b;  // (3), (1)
  int bad_rank = 0;
  int64_t bad_batch = 1;
  Regressor() {
    w = register_parameter("w", zeros({3}, DType::f64));
    b = register_parameter("b", zeros({1}, DType::f64));
  }
  Tensor training_step(const Batch& batch, int64_t idx) override {
    Tensor loss = mse_loss((batch.input * w).sum({1}) + b, batch.target);
    if (idx == bad_batch && dist::default_group().rank() == bad_rank)
      return loss * std::numeric_limits<double>::quiet_NaN();
    return loss;
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.1}); }
};

std::shared_ptr<data::DataLoader> loader(int64_t n) {
  std::vector<double> xs(n * 3), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) xs[i * 3 + j] = std::sin(0.9 * i + 1.7 * j);
    ys[i] = xs[i * 3] - 2 * xs[i * 3 + 1] + 0.3;
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {n, 3}), from_vector(ys, {n}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2});
}

}  // namespace

TEST(DdpNonFinite, OneRanksNaNSkipsTheStepEverywhere) {
  auto& pg = dist::default_group();
  Regressor m;
  m.bad_rank = pg.world_size() - 1;
  TrainerOptions o = test::ddp_options();
  o.max_epochs = 1;
  o.on_nonfinite_loss = NonFiniteLoss::skip;
  Trainer t(o);
  t.fit(m, loader(8 * pg.world_size()));  // 4 batches per rank
  EXPECT_EQ(t.nonfinite_losses(), 1);
  EXPECT_EQ(t.global_step(), 3);
  Tensor p = cat({m.w.detach(), m.b.detach()}, 0);
  for (double v : p.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
  Tensor all = pg.all_gather(p);  // (world, 4): every replica holds the same parameters
  for (int r = 1; r < pg.world_size(); ++r) EXPECT_EQ(all.select(0, r).contiguous().to_vector<double>(), all.select(0, 0).contiguous().to_vector<double>());
}
