#pragma once
// Helpers shared by the strategy tests (ZeRO, FSDP, sharded checkpoints, dp/ddp2): quiet CPU Trainer options,
// every parameter's values in registration order and the largest difference between two such lists, and the
// callbacks that save a checkpoint at the end of fit and capture the state right after a resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <volt/nn/module.h>
#include <volt/trainer/trainer.h>

namespace volt::test {

/// CPU training under `strategy` on `devices` with nothing printed or written (no progress bar, summary,
/// checkpoints, logger or sanity check).
inline TrainerOptions quiet_options(const std::string& strategy, const std::string& devices) {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = devices;
  o.strategy = strategy;
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.enable_checkpointing = false;
  o.logger = false;
  o.num_sanity_val_steps = 0;
  return o;
}

inline std::vector<std::vector<double>> parameter_values(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p.detach().contiguous().to_vector<double>());
  return out;
}

/// Also fails the test when the lists (or one parameter's values) differ in length.
inline double max_abs_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double d = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    for (size_t j = 0; j < a[i].size() && j < b[i].size(); ++j) d = std::max(d, std::abs(a[i][j] - b[i][j]));
  }
  return d;
}

/// Saves a checkpoint at `stem` at the end of fit, on every rank (inside fit: sharded strategies gather or write
/// their optimizer state there, and drop it at teardown).
struct SaveAtEnd : Callback {
  std::string stem;
  explicit SaveAtEnd(std::string s) : stem(std::move(s)) {}
  void on_fit_end(Trainer& trainer, TrainModule&) override { trainer.save_checkpoint(stem); }
};

/// The first optimizer's full-layout state and the parameters right after a resume (on_fit_start follows the
/// load).
struct CaptureAtStart : Callback {
  nn::StateDict opt_state;
  std::map<std::string, double> hyper;
  std::vector<std::vector<double>> params;
  void on_fit_start(Trainer& trainer, TrainModule& m) override {
    auto st = trainer.strategy().optimizer_state(*trainer.optimizers()[0]);
    for (auto& [k, t] : st.tensors) opt_state.emplace_back(k, t.clone());
    hyper = st.hyper;
    params = parameter_values(m);
  }
};

}  // namespace volt::test
