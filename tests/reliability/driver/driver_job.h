#pragma once
// The training job both reliability drivers run (kill_resume_driver.cpp, preempt_driver.cpp): an MLP with
// dropout on synthetic regression data, Adam with an epoch and a step LR scheduler, and a shuffled loader, so
// every piece of state a resume must restore is present.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/trainer/trainer.h>

namespace volt::reliability {

struct DriverMlp : TrainModule {
  nn::Linear fc1{4, 16}, fc2{16, 1};
  DriverMlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  std::string type_name() const override { return "Mlp"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    Tensor h = dropout(relu(fc1.forward(batch.input)), 0.2, is_training());
    Tensor loss = mse_loss(fc2.forward(h).reshape({-1}), batch.target);
    log("train_loss", loss);
    return loss;
  }
  Optimizers configure_optimizers() override {
    auto opt = std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 0.02});
    Optimizers o(opt);
    o.schedulers.push_back({std::make_shared<optim::StepLR>(*opt, 1, 0.7), SchedulerInterval::epoch, 1});
    o.schedulers.push_back({std::make_shared<optim::LambdaLR>(*opt, [](int64_t s) { return 1.0 / (1.0 + 0.05 * s); }),
                            SchedulerInterval::step, 1});
    return o;
  }
};

// `n` samples of 4 features in shuffled batches of 8.
inline std::shared_ptr<data::DataLoader> make_driver_loader(int64_t n) {
  const int64_t d = 4;
  std::vector<float> xs(n * d), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    double y = 0.1;
    for (int64_t j = 0; j < d; ++j) {
      xs[i * d + j] = static_cast<float>(std::sin(0.37 * i + 1.1 * j));
      y += (j % 2 ? -1.0 : 0.5) * xs[i * d + j];
    }
    ys[i] = static_cast<float>(y * y);
  }
  auto ds = std::make_shared<data::TensorDataset>(from_vector(xs, {n, d}), from_vector(ys, {n}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 8, .shuffle = true});
}

}  // namespace volt::reliability
