#pragma once
// The model and data of the ZeRO tests (test_zero.cpp and the zero_resume driver): an f64 regressor with 29
// parameters in two Adam parameter groups of 20 and 9 values, so that neither divides evenly by 2 or 3 ranks
// (the shards are padded) and the layout has two buckets.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <volt/data/data.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/trainer/trainer.h>

#include "common/strategy_test_util.h"

namespace volt::test {

struct ZeroMlp : TrainModule {
  Tensor w1, b1, w2, b2, skip;  // (3, 5), (5), (5, 1), (1), (3)
  bool adamw = false;
  ZeroMlp() {
    w1 = register_parameter("w1", cast(rand_with_seed({3, 5}, 31, 0), DType::f64) - 0.5);
    b1 = register_parameter("b1", cast(rand_with_seed({5}, 32, 0), DType::f64) * 0.2);
    w2 = register_parameter("w2", cast(rand_with_seed({5, 1}, 33, 0), DType::f64) - 0.5);
    b2 = register_parameter("b2", zeros({1}, DType::f64));
    skip = register_parameter("skip", cast(rand_with_seed({3}, 34, 0), DType::f64) * 0.1);
  }
  std::string type_name() const override { return "ZeroMlp"; }
  Tensor forward_batch(const Tensor& x) {
    return matmul(relu(matmul(x, w1) + b1), w2).reshape({-1}) + b2 + (x * skip).sum({1});
  }
  Tensor training_step(const Batch& b, int64_t) override { return mse_loss(forward_batch(b.input), b.target); }
  Optimizers configure_optimizers() override {
    std::vector<optim::ParamGroup> groups = {{{w1, b1}, 0.02, {}}, {{w2, b2, skip}, 0.01, {}}};
    if (adamw) return std::make_shared<optim::AdamW>(groups, optim::AdamWOptions{.weight_decay = 0.1});
    return std::make_shared<optim::Adam>(groups, optim::AdamOptions{.weight_decay = 0.01});
  }
};

inline std::shared_ptr<data::TensorDataset> zero_regression_data(int64_t n) {
  std::vector<double> xs(n * 3), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) xs[i * 3 + j] = std::sin(0.7 * i + 1.3 * j) + 0.2 * j;
    ys[i] = xs[i * 3] - 1.5 * xs[i * 3 + 1] + 0.4 * xs[i * 3 + 2] * xs[i * 3 + 2] + 0.1;
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {n, 3}), from_vector(ys, {n}));
}

// Quiet CPU training under `strategy`; the world size comes from the launcher.
inline TrainerOptions zero_options(const std::string& strategy) {
  return quiet_options(strategy, "auto");  // one process, or the launcher's world (num_nodes = 1)
}

}  // namespace volt::test
