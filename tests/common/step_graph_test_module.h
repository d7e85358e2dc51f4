#pragma once
// The module and helpers of the captured-training-step tests (trainer/step_graph.h): tests/trainer/
// test_step_graph.cpp on one process, tests/distributed/test_ddp_step_graph.cpp under mpirun.
#include <cstring>
#include <string>
#include <vector>

#include "trainer/trainer_test_util.h"

namespace volt::test {

// Linear -> BatchNorm1d -> ReLU -> dropout -> Linear, Adam with a per-step StepLR; logs its loss per step and per
// epoch. Counts its training_step calls (host code a replay does not run).
struct GraphNet : TrainModule {
  nn::Linear l1{3, 8};
  nn::BatchNorm1d bn{8};
  nn::Linear l2{8, 1};
  int64_t host_calls = 0;
  bool read_host = false;   // training_step calls item(): not capturable
  bool log_metric = false;  // training_step logs a metric object: not capturable
  metrics::MeanMetric mean;
  std::shared_ptr<optim::Adam> opt;
  GraphNet() {
    register_module("l1", l1);
    register_module("bn", bn);
    register_module("l2", l2);
  }
  std::string type_name() const override { return "GraphNet"; }
  Tensor forward(const Tensor& x) { return l2(dropout(bn(l1(x)).relu(), 0.25, is_training())).flatten(0); }
  Tensor training_step(const Batch& b, int64_t) override {
    ++host_calls;
    Tensor loss = mse_loss(forward(b.input), b.target);
    if (read_host && loss.item() < 0) return Tensor();
    if (log_metric) log("mean_loss", mean);
    log("loss", loss, {.on_step = true, .on_epoch = true});
    return loss;
  }
  bool static_training_step() const override { return true; }
  Optimizers configure_optimizers() override {
    opt = std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 0.05});
    auto s = std::make_shared<optim::StepLR>(*opt, 2, 0.7);
    return Optimizers(opt, SchedulerConfig{s, SchedulerInterval::step, 1});
  }
};

inline TrainerOptions graph_options(const std::string& dir, CudaGraphs mode) {
  TrainerOptions o = quiet(dir);
  o.max_epochs = 2;
  o.cuda_graphs = mode;
  o.gradient_clip_val = 0.5;  // clipping is captured too
  return o;
}

inline void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  std::vector<double> x = a.detach().to_vector<double>(), y = b.detach().to_vector<double>();
  ASSERT_EQ(x.size(), y.size()) << what;
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(double))) << what;
}

// Two epochs of 22 samples in batches of 4 (five full batches and a partial one each) under `mode`, after
// manual_seed(3), logging under dir/<sub>; returns the fit's graph replays, the captured step's recorded kernel
// calls and the callback metrics.
struct FitResult {
  int64_t replays;
  size_t nodes;
  MetricMap metrics;
};
inline FitResult fit_two_epochs(GraphNet& m, const std::string& dir, const std::string& sub, CudaGraphs mode,
                                const std::string& strategy = "auto", const std::string& accelerator = "cpu") {
  manual_seed(3);
  TrainerOptions o = graph_options(dir + "/" + sub, mode);
  o.strategy = strategy;
  if (strategy == "ddp") o.devices = "auto";  // the launcher's processes (one without a launcher)
  o.accelerator = accelerator;
  Trainer t(o);
  t.fit(m, make_loader(22, 4));
  return {t.step_graph().replays(), t.step_graph().num_nodes(), t.callback_metrics()};
}

inline void expect_same_dicts(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    expect_same_bits(a[i].second, b[i].second, a[i].first);
  }
}

}  // namespace volt::test
