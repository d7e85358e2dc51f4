// all_gather with gradients (ProcessGroup::all_gather_with_grad, TrainModule::all_gather(t, sync_grads)):
// each rank's input receives the sum over ranks of the gradient that reached its row of the gathered tensor.
#include <gtest/gtest.h>

#include <vector>

#include "common/gradcheck.h"
#include <volt/distributed/process_group.h>
#include "common/ddp_test_util.h"
#include <volt/data/data.h>
#include <volt/kernels/ops.h>

using namespace volt;

namespace {
dist::ProcessGroup& group() { return dist::default_group(); }
}  // namespace

TEST(AllGatherGrad, EachRankGetsTheSumOverRanksOfItsRowsGradient) {
  const int r = group().rank(), w = group().world_size();
  // x_r = (r + 1) * [1, 2, 3] on rank r.
  Tensor x = mul(from_vector<double>({1, 2, 3}), static_cast<double>(r + 1)).set_requires_grad();
  Tensor g = group().all_gather_with_grad(x);
  ASSERT_EQ(g.shape(), (Shape{w, 3}));
  ASSERT_TRUE(g.requires_grad());
  for (int k = 0; k < w; ++k)
    EXPECT_EQ(g.select(0, k).to_vector<double>(), (std::vector<double>{k + 1., 2. * (k + 1), 3. * (k + 1)}));
  // loss_q = sum_k c(q, k) * sum_j g[k, j]^2 with c(q, k) = (q + 1) * (k + 2): d loss_q / d x_k = 2 c(q, k) x_k,
  // so the gradient of x_r summed over every rank's loss is 2 x_r (r + 2) sum_q (q + 1).
  std::vector<double> c(static_cast<size_t>(w));
  for (int k = 0; k < w; ++k) c[static_cast<size_t>(k)] = (r + 1.0) * (k + 2.0);
  Tensor loss = (mul(from_vector<double>(c, {w, 1}), mul(g, g))).sum();
  loss.backward();
  const double sum_q = w * (w + 1) / 2.0;
  const std::vector<double> got = x.grad().to_vector<double>();
  for (int j = 0; j < 3; ++j)
    EXPECT_DOUBLE_EQ(got[static_cast<size_t>(j)], 2.0 * (j + 1) * (r + 1) * (r + 2) * sum_q) << j;
}

TEST(AllGatherGrad, NoGradientWithoutRequiresGradAndDetachedGatherStaysDetached) {
  Tensor x = ones({2}, DType::f64);
  EXPECT_FALSE(group().all_gather_with_grad(x).requires_grad());
  Tensor y = ones({2}, DType::f64).set_requires_grad();
  EXPECT_FALSE(group().all_gather(y).requires_grad());  // the plain gather never carries gradients
}

// Through the Trainer (DDPStrategy): training_step gathers a parameter-derived tensor with and without
// sync_grads; only the synced gather carries gradients, and the step's backward runs through it on every rank.
namespace {
struct GatherModule : TrainModule {
  Tensor w = register_parameter("w", ones({2}));
  bool synced_requires_grad = false, plain_requires_grad = true;
  Shape synced_shape;
  std::string type_name() const override { return "GatherModule"; }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor mine = (b.input * w).sum({0});  // (2), depends on w
    Tensor all = all_gather(mine, /*sync_grads=*/true);
    synced_requires_grad = all.requires_grad();
    synced_shape = all.shape();
    plain_requires_grad = all_gather(mine).requires_grad();
    return mul(all, all).sum();
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.0}); }
};
}  // namespace

TEST(AllGatherGrad, TrainModuleSyncGradsThroughTheDdpStrategy) {
  TrainerOptions o = test::ddp_options();
  o.max_steps = 1;
  Trainer trainer(o);
  GatherModule m;
  auto ds = std::make_shared<data::TensorDataset>(ones({8, 2}), zeros({8}));
  trainer.fit(m, std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2}));
  EXPECT_TRUE(m.synced_requires_grad);
  EXPECT_FALSE(m.plain_requires_grad && group().world_size() > 1);
  const Shape want = group().world_size() > 1 ? Shape{group().world_size(), 2} : Shape{2};
  EXPECT_EQ(m.synced_shape, want);
  EXPECT_EQ(trainer.global_step(), 1);  // the step (and its backward through the gather) ran on every rank
}
