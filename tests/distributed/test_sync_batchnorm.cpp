// Synchronised batch normalisation (nn::BatchNormBase::set_sync, TrainerOptions::sync_batchnorm) under mpirun:
// each rank normalises its slice with the statistics of the global batch, and values, input gradients,
// parameter gradients and running estimates equal one process normalising the whole batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/ddp_test_util.h"
#include <volt/data/data.h>
#include <volt/nn/nn.h>

using namespace volt;

namespace {

dist::ProcessGroup& pg() { return dist::default_group(); }
int rank() { return pg().rank(); }
int world() { return pg().world_size(); }

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = a.to(DType::f64).to_vector<double>(), y = b.to(DType::f64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol) << what << " [" << i << "]";
}

// Every rank's slice of the global batch: rows [rank * per, (rank + 1) * per).
Tensor slice(const Tensor& global, int64_t per) { return global.narrow(0, rank() * per, per).contiguous(); }

void check_against_one_process(const Shape& local_shape, uint64_t seed) {
  const int64_t per = local_shape[0], C = local_shape[1];
  Shape global_shape = local_shape;
  global_shape[0] = per * world();
  // Values far from zero: the shifted statistics must not lose them to cancellation.
  Tensor X = rand_with_seed(global_shape, seed, 0) * 3.0 + 50.0;
  Tensor coef = rand_with_seed(global_shape, seed + 1, 0);

  nn::BatchNorm2d ref(C);  // one process, whole batch
  nn::BatchNorm2d bn(C);   // this rank's slice, synchronised
  for (nn::BatchNorm2d* m : {&ref, &bn}) {
    NoGradGuard ng;
    m->weight.copy_(from_vector<float>({1.5f, -0.5f, 2.0f}).narrow(0, 0, C));
    m->bias.copy_(from_vector<float>({0.1f, 0.2f, -0.3f}).narrow(0, 0, C));
    m->running_mean.fill_(49.0);
  }
  bn.set_sync([](Tensor& t) { pg().all_reduce(t, dist::ReduceOp::Sum); });
  ASSERT_TRUE(bn.synced());
  ref.train();
  bn.train();

  Tensor Xg = X.clone().set_requires_grad();
  Tensor y_ref = ref(Xg);
  (y_ref * coef).sum().backward();

  Tensor x = slice(X, per).set_requires_grad();
  Tensor y = bn(x);
  // The loss of the whole job is the sum of every rank's loss.
  (y * slice(coef, per)).sum().backward();

  expect_close(y, slice(y_ref.detach(), per), 1e-4, "output");
  expect_close(x.grad(), slice(Xg.grad(), per), 1e-4, "input gradient");
  Tensor gw = bn.weight.grad().clone(), gb = bn.bias.grad().clone();
  pg().all_reduce(gw, dist::ReduceOp::Sum);  // DDP sums (then averages) the ranks' parameter gradients
  pg().all_reduce(gb, dist::ReduceOp::Sum);
  expect_close(gw, ref.weight.grad(), 1e-3, "weight gradient");
  expect_close(gb, ref.bias.grad(), 1e-3, "bias gradient");
  expect_close(bn.running_mean, ref.running_mean, 1e-4, "running_mean");
  expect_close(bn.running_var, ref.running_var, 1e-4, "running_var");

  // Eval mode uses the running estimates only: no collective, same result on every rank as the reference.
  bn.eval();
  ref.eval();
  expect_close(bn(x.detach()), slice(ref(X).detach(), per), 1e-4, "eval output");
}

// Conv-net-like module: BatchNorm1d over features, with a scalar regression loss.
struct BnModule : TrainModule {
  nn::Linear fc{4, 3};
  nn::BatchNorm1d bn{3};
  nn::Linear out{3, 1};
  BnModule() {
    register_module("fc", fc);
    register_module("bn", bn);
    register_module("out", out);
  }
  std::string type_name() const override { return "BnModule"; }
  Tensor training_step(const Batch& b, int64_t) override {
    return mse_loss(out(bn(fc(b.input)).relu()).reshape({-1}), b.target);
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.05}); }
};

std::vector<double> gathered(const Tensor& t) {
  return pg().all_gather(t.detach().contiguous()).to(DType::f64).to_vector<double>();
}

}  // namespace

TEST(SyncBatchNorm, EachRankNormalisesWithTheGlobalBatchStatistics) {
  check_against_one_process({4, 3, 2, 2}, 11);
  check_against_one_process({1, 2, 3, 1}, 12);  // one sample per rank: only the global batch has statistics
}

TEST(SyncBatchNorm, TrainerOptionSyncsEveryBatchNormUnderDdp) {
  auto run = [](bool sync) {
    manual_seed(5);
    BnModule m;
    TrainerOptions o = test::ddp_options();
    o.max_epochs = 2;
    o.sync_batchnorm = sync;
    Trainer t(o);
    // Different data on every rank (the sampler shards), so per-rank statistics differ.
    auto loader = std::make_shared<data::DataLoader>(
        std::make_shared<data::TensorDataset>(rand_with_seed({48, 4}, 21, 0) * 4.0 + 1.0, rand_with_seed({48}, 22, 0)),
        data::DataLoaderOptions{.batch_size = 4});
    t.fit(m, loader);
    EXPECT_FALSE(m.bn.synced()) << "the layer must not keep the Trainer's collective after fit";
    return gathered(m.bn.running_mean);
  };
  const std::vector<double> synced = run(true), local = run(false);
  const size_t C = 3;
  // With sync: every rank holds the same running mean; without: they differ (for more than one rank).
  for (int r = 1; r < world(); ++r) {
    double local_gap = 0;
    for (size_t c = 0; c < C; ++c) {
      EXPECT_NEAR(synced[r * C + c], synced[c], 1e-5) << "rank " << r << " channel " << c;
      local_gap = std::max(local_gap, std::fabs(local[r * C + c] - local[c]));
    }
    EXPECT_GT(local_gap, 1e-4) << "without sync_batchnorm rank " << r << " should have its own statistics";
  }
}
