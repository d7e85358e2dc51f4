// An outside project's training program: writes a regression dataset as .npy files, reads it back with
// NpyDataset and fits a linear model with the Trainer, through the installed headers only. Prints a line
// that tests/consumer/run_consumer.cmake checks; exits nonzero when training did not converge.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <volt/volt.h>  // the whole public API
// One header by its package path and one by its Volt 0.1 flat path (a forwarding header until Volt 0.3): both
// must keep compiling against an install.
#include <volt/trainer/ddp_strategy.h>
#include <volt/trainer/strategies/registry.h>

namespace {

struct LinearRegression : volt::TrainModule {
  volt::nn::Linear fc{3, 1};
  double first_loss = -1, last_loss = -1;
  LinearRegression() { register_module("fc", fc); }
  volt::Tensor training_step(const volt::Batch& b, int64_t) override {
    volt::Tensor loss = volt::mse_loss(fc(b.input).reshape({-1}), b.target);
    last_loss = loss.item();
    if (first_loss < 0) first_loss = last_loss;
    return loss;
  }
  volt::Optimizers configure_optimizers() override { return volt::optim::Adam(parameters(), {.lr = 0.05}); }
};

}  // namespace

int main() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("volt_consumer_npy_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // y = x . [1, -2, 0.5] + 0.3 on 256 fixed points.
  const int64_t n = 256;
  std::vector<float> xs(n * 3), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) xs[i * 3 + j] = static_cast<float>(((i * 7 + j * 13) % 17) / 8.0 - 1.0);
    ys[i] = xs[i * 3] - 2.0f * xs[i * 3 + 1] + 0.5f * xs[i * 3 + 2] + 0.3f;
  }
  volt::data::write_npy((dir / "x.npy").string(), volt::from_vector(xs, {n, 3}));
  volt::data::write_npy((dir / "y.npy").string(), volt::from_vector(ys, {n}));
  auto dataset = volt::data::NpyDataset::from_npy((dir / "x.npy").string(), (dir / "y.npy").string());
  auto loader = std::make_shared<volt::data::DataLoader>(
      dataset, volt::data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .seed = 1});
  volt::manual_seed(3);
  LinearRegression model;
  // A strategy of the program's own, registered by name and picked by TrainerOptions::strategy.
  int made = 0;
  volt::register_strategy("consumer_single", {.make = [&made](const volt::StrategyOptions&) {
                                                ++made;
                                                return std::make_unique<volt::SingleDeviceStrategy>();
                                              }});
  volt::Trainer trainer({.accelerator = "cpu", .devices = "1", .strategy = "consumer_single", .max_epochs = 20, .enable_progress_bar = false,
                         .enable_model_summary = false, .enable_checkpointing = false,
                         .default_root_dir = dir.string(), .logger = false});
  trainer.fit(model, loader);
  fs::remove_all(dir);
  std::printf("volt-consumer-train: samples=%lld steps=%lld first_loss=%.4g last_loss=%.4g\n",
              static_cast<long long>(dataset->size()), static_cast<long long>(trainer.global_step()),
              model.first_loss, model.last_loss);
  const bool ok = dataset->size() == n && trainer.global_step() == 160 && model.last_loss < 0.01 * model.first_loss &&
                  made == 1 && sizeof(volt::DDPStrategy) > 0;
  std::printf(ok ? "volt-consumer-train: ok\n" : "volt-consumer-train: DID NOT CONVERGE\n");
  return ok ? 0 : 1;
}
