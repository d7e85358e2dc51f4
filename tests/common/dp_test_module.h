#pragma once
// The model and data of the dp / ddp2 tests (tests/trainer/test_dp.cpp, test_dp_replicas.cpp,
// tests/distributed/test_ddp2.cpp): an f64 three-class classifier 4 -> 6 -> 3 with raw parameters (no initialiser
// draws), optional dropout, a replicable variant (TrainModule::make_replica) that checks its replicas, and a
// deterministic labelled data set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <volt/data/data.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/trainer/strategies/dp.h>
#include <volt/trainer/trainer.h>

#include "common/strategy_test_util.h"

namespace volt::test {

struct DpNet : TrainModule {
  Tensor w1, b1, w2, b2;  // (4, 6), (6), (6, 3), (3)
  double dropout_p = 0;
  std::string optimizer = "adam";
  DpNet() {
    w1 = register_parameter("w1", cast(rand_with_seed({4, 6}, 41, 0), DType::f64) - 0.5);
    b1 = register_parameter("b1", cast(rand_with_seed({6}, 42, 0), DType::f64) * 0.2);
    w2 = register_parameter("w2", cast(rand_with_seed({6, 3}, 43, 0), DType::f64) - 0.5);
    b2 = register_parameter("b2", zeros({3}, DType::f64));
  }
  std::string type_name() const override { return "DpNet"; }
  Tensor logits(const Tensor& x) {
    Tensor h = relu(matmul(x, w1) + b1);
    if (dropout_p > 0) h = dropout(h, dropout_p, is_training());
    return matmul(h, w2) + b2;
  }
  Tensor training_step(const Batch& b, int64_t) override { return cross_entropy(logits(b.input), b.target); }
  Optimizers configure_optimizers() override {
    if (optimizer == "sgd") return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.2});
    return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 0.02});
  }
};

// `Base` (a DpNet or a subclass) with make_replica(). A replica's steps first report to the root: whether a
// parameter shares the root's storage, and how far its values are from the root's at the step's start (0 when
// the strategy copied the root's current values in).
template <class Base>
struct Replicable : Base {
  const Replicable* root = nullptr;  // set on replicas
  mutable std::mutex mu;             // the root's report, written by replica threads
  mutable int64_t replica_steps = 0;
  mutable double max_start_diff = 0;
  mutable bool shared_storage = false;
  std::unique_ptr<TrainModule> make_replica() const override {
    auto r = std::make_unique<Replicable>();
    r->root = this;
    r->dropout_p = this->dropout_p;
    r->optimizer = this->optimizer;
    return r;
  }
  void report() const {
    if (!root) return;
    const auto mine = this->named_parameters(), theirs = root->named_parameters();
    std::lock_guard<std::mutex> l(root->mu);
    ++root->replica_steps;
    for (size_t i = 0; i < mine.size(); ++i) {
      root->shared_storage |= mine[i].second.data_ptr() == theirs[i].second.data_ptr();
      const auto a = mine[i].second.template to_vector<double>(), b = theirs[i].second.template to_vector<double>();
      for (size_t j = 0; j < a.size(); ++j) root->max_start_diff = std::max(root->max_start_diff, std::abs(a[j] - b[j]));
    }
  }
  StepOutput training_step_outputs(const Batch& b, int64_t i) override {
    report();
    return Base::training_step_outputs(b, i);
  }
  StepOutput validation_step_outputs(const Batch& b, int64_t i) override {
    report();
    return Base::validation_step_outputs(b, i);
  }
};
using ReplicableNet = Replicable<DpNet>;

// n samples of 4 features; the label is the arg max of three fixed projections (learnable, not separable by
// chance).
inline std::shared_ptr<data::TensorDataset> dp_data(int64_t n) {
  std::vector<double> xs(n * 4);
  std::vector<int64_t> ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 4; ++j) xs[i * 4 + j] = std::sin(0.9 * i + 1.7 * j) + 0.1 * j;
    const double* x = &xs[i * 4];
    const double s[3] = {x[0] - x[1], x[2] + 0.5 * x[3], -x[0] + 0.3 * x[2] + 0.2};
    ys[i] = s[0] > s[1] ? (s[0] > s[2] ? 0 : 2) : (s[1] > s[2] ? 1 : 2);
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {n, 4}), from_vector(ys, {n}));
}

// Quiet CPU training under `strategy` with `devices`.
inline TrainerOptions dp_options(const std::string& strategy, const std::string& devices) {
  return quiet_options(strategy, devices);
}

// A BatchNorm layer whose running statistics the dp tests compare (SGD with lr 0: only the statistics move).
struct BnNet : TrainModule {
  nn::BatchNorm1d bn{4};
  Tensor w;
  BnNet() {
    register_module("bn", bn);
    w = register_parameter("w", full({4}, 0.5, DType::f64));
    bn.to(DType::f64);
  }
  Tensor training_step(const Batch& b, int64_t) override {
    return mse_loss((bn.forward(b.input) * w).sum({1}), b.target.to(DType::f64));
  }
  Optimizers configure_optimizers() override {
    return std::make_shared<optim::SGD>(parameters(), optim::SGDOptions{.lr = 0.0});
  }
  std::unique_ptr<TrainModule> make_replica() const override { return std::make_unique<BnNet>(); }
};

// What one training run of the dp tests varies.
struct DpRun {
  int64_t accumulate = 1;
  double clip = 0;
  int64_t batch = 6;
  int64_t n = 24;
  int64_t epochs = 2;
  double dropout = 0;
};

// Trains `*out` (a fresh M when null) on dp_data(c.n) under `strategy` with `devices`, seed 3; `replicas` sets
// TrainerOptions::dp_replicas. Returns the parameters after fit (a dp strategy has dropped its replicas by then).
template <class M = DpNet>
std::vector<std::vector<double>> train_dp(const std::string& strategy, const std::string& devices, const DpRun& c,
                                          bool replicas = false, M* out = nullptr) {
  TrainerOptions o = dp_options(strategy, devices);
  o.max_epochs = c.epochs;
  o.accumulate_grad_batches = c.accumulate;
  o.gradient_clip_val = c.clip;
  o.seed = 3;
  o.dp_replicas = replicas;
  Trainer trainer(o);
  M local;
  M& m = out ? *out : local;
  m.dropout_p = c.dropout;
  auto loader = std::make_shared<data::DataLoader>(dp_data(c.n), data::DataLoaderOptions{.batch_size = c.batch});
  trainer.fit(m, loader);
  EXPECT_EQ(trainer.strategy().name(), strategy);
  if (strategy == "dp") EXPECT_FALSE(dynamic_cast<DPStrategy&>(trainer.strategy()).uses_replicas());
  return parameter_values(m);
}

}  // namespace volt::test
