#pragma once
// Shared pieces of the trainer tests: a tiny linear-regression module built from raw parameters and
// elementwise ops, deterministic loaders, a scratch directory and a CSV reader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include <volt/data/data.h>
#include <volt/nn/metrics.h>
#include <volt/nn/nn.h>
#include <volt/trainer/trainer.h>

namespace volt::test {

// y = sum(x * w, dim 1) + b, loss = MSE. x (B, D), y (B).
struct TinyModule : TrainModule {
  Tensor w;  // (D)
  Tensor b;  // (1)
  double lr = 0.1;
  std::string optimizer = "sgd";
  double dropout_p = 0.0;
  std::vector<std::string> calls;  // hook names, in call order
  bool record = false;
  // Optional extra behaviour injected by tests.
  std::function<void(TinyModule&, const Batch&, int64_t, const Tensor&)> on_train_step;
  std::function<void(TinyModule&, const Batch&, int64_t, const Tensor&)> on_val_step;
  std::function<void(TinyModule&)> on_val_epoch_end;
  std::function<void(TinyModule&)> on_train_epoch_end_fn;
  std::function<Optimizers(TinyModule&)> make_optimizers;
  int64_t val_steps = 0, train_steps = 0;

  explicit TinyModule(int64_t d = 3) {
    w = register_parameter("w", zeros({d}));
    b = register_parameter("b", zeros({1}));
  }
  std::string type_name() const override { return "TinyModule"; }
  void rec(const std::string& s) {
    if (record) calls.push_back(s);
  }
  Tensor predict(const Tensor& x) {
    Tensor in = dropout_p > 0 ? dropout(x, dropout_p, is_training()) : x;
    return (in * w).sum({1}) + b;
  }
  Tensor training_step(const Batch& batch, int64_t idx) override {
    rec("training_step");
    ++train_steps;
    Tensor loss = mse_loss(predict(batch.input), batch.target);
    if (on_train_step) on_train_step(*this, batch, idx, loss);
    return loss;
  }
  void validation_step(const Batch& batch, int64_t idx) override {
    rec("validation_step");
    ++val_steps;
    Tensor loss = mse_loss(predict(batch.input), batch.target);
    if (on_val_step) on_val_step(*this, batch, idx, loss);
  }
  void test_step(const Batch& batch, int64_t idx) override {
    log("test_loss", mse_loss(predict(batch.input), batch.target));
  }
  Tensor predict_step(const Batch& batch, int64_t) override { return predict(batch.input); }
  Optimizers configure_optimizers() override {
    rec("configure_optimizers");
    if (make_optimizers) return make_optimizers(*this);
    if (optimizer == "adam") return optim::Adam(parameters(), {.lr = lr});
    return optim::SGD(parameters(), {.lr = lr});
  }
  void on_fit_start() override { rec("on_fit_start"); }
  void on_fit_end() override { rec("on_fit_end"); }
  void on_train_epoch_start() override { rec("on_train_epoch_start"); }
  void on_train_epoch_end() override {
    rec("on_train_epoch_end");
    if (on_train_epoch_end_fn) on_train_epoch_end_fn(*this);
  }
  void on_validation_epoch_start() override { rec("on_validation_epoch_start"); }
  void on_validation_epoch_end() override {
    rec("on_validation_epoch_end");
    if (on_val_epoch_end) on_val_epoch_end(*this);
  }
  bool on_train_batch_start(const Batch&, int64_t) override {
    rec("on_train_batch_start");
    return true;
  }
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override { rec("on_train_batch_end"); }
  void on_before_backward(const Tensor&) override { rec("on_before_backward"); }
  void on_after_backward() override { rec("on_after_backward"); }
  void on_before_optimizer_step(optim::Optimizer&, int) override { rec("on_before_optimizer_step"); }
  void on_before_zero_grad(optim::Optimizer&) override { rec("on_before_zero_grad"); }
};

// n samples of x (n, d) = a fixed pattern, y = x·[1, -2, 0.5] + 0.3 (+ small noise pattern).
inline std::shared_ptr<data::TensorDataset> make_dataset(int64_t n, int64_t d = 3) {
  std::vector<float> xs(n * d), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    double y = 0.3;
    const double coef[3] = {1.0, -2.0, 0.5};
    for (int64_t j = 0; j < d; ++j) {
      float v = static_cast<float>(std::sin(0.7 * i + 1.3 * j) + 0.1 * j);
      xs[i * d + j] = v;
      y += coef[j % 3] * v;
    }
    ys[i] = static_cast<float>(y + 0.05 * std::cos(3.0 * i));
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {n, d}), from_vector(ys, {n}));
}

inline std::shared_ptr<data::DataLoader> make_loader(int64_t n, int64_t batch, bool shuffle = false,
                                                     uint64_t seed = 7) {
  return std::make_shared<data::DataLoader>(make_dataset(n),
                                            data::DataLoaderOptions{.batch_size = batch, .shuffle = shuffle, .seed = seed});
}

// A fresh empty directory under the system temp dir, removed at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() / ("volt_trainer_test_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// Options for quiet, fast tests writing under `dir`.
inline TrainerOptions quiet(const std::string& dir) {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = "1";
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.default_root_dir = dir;
  o.log_every_n_steps = 1;
  o.num_sanity_val_steps = 0;
  return o;
}

// The profiler's row for (layer, name), or nullptr. (Not from a temporary list: the row would dangle.)
const ProfileStat* find_stat(const std::vector<ProfileStat>&&, const std::string&, const std::string&) = delete;
inline const ProfileStat* find_stat(const std::vector<ProfileStat>& rows, const std::string& layer,
                                    const std::string& name) {
  for (const auto& r : rows)
    if (r.layer == layer && r.name == name) return &r;
  return nullptr;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
};
inline Csv read_csv(const std::string& path) {
  Csv c;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::string line;
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
    if (!s.empty() && s.back() == ',') out.push_back("");
    return out;
  };
  if (!std::getline(f, line)) return c;
  c.header = split(line);
  while (std::getline(f, line)) {
    auto cells = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < c.header.size() && i < cells.size(); ++i)
      if (!cells[i].empty()) row[c.header[i]] = cells[i];
    c.rows.push_back(row);
  }
  return c;
}

inline std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

}  // namespace volt::test
