// The Trainer's captured training step (TrainerOptions::cuda_graphs, trainer/step_graph.h), run on the CPU where
// cuda_graphs=on records the step's kernel calls: training, logging, schedulers and checkpoints must equal eager
// training bit for bit, and what cannot be captured is refused with a clear error.
#include "common/error_message.h"
#include "common/step_graph_test_module.h"

using namespace volt;
using namespace volt::test;

TEST(StepGraph, CapturedTrainingEqualsEagerBitForBit) {
  ScratchDir dir("step_graph");
  // 22 samples in batches of 4: five full batches and a partial one per epoch, two epochs.
  manual_seed(11);
  GraphNet eager;
  manual_seed(11);
  GraphNet graphed;
  auto [eager_replays, eager_nodes, eager_metrics] = fit_two_epochs(eager, dir.str(), "off", CudaGraphs::off);
  auto [replays, nodes, metrics] = fit_two_epochs(graphed, dir.str(), "on", CudaGraphs::on);
  EXPECT_EQ(eager_nodes, 0u);
  EXPECT_GT(nodes, 20u);  // forward, backward, clipping and the update as recorded kernel calls
  EXPECT_EQ(eager_replays, 0);
  // Epoch 1: two warm-up steps, the capture (replayed at once) and two replays, the partial batch eagerly;
  // epoch 2: five replays and the partial batch.
  EXPECT_EQ(replays, 8);
  EXPECT_EQ(graphed.host_calls, eager.host_calls - replays + 1);  // the host code ran once for all replays
  expect_same_dicts(graphed.named_parameters(), eager.named_parameters());
  expect_same_dicts(graphed.named_buffers(), eager.named_buffers());  // BatchNorm statistics and batch count
  // What a checkpoint saves of the optimizer: moments and step counts (a replay counts through its refresh).
  expect_same_dicts(graphed.opt->state_dict(), eager.opt->state_dict());
  EXPECT_EQ(graphed.opt->step_count(0, 0), eager.opt->step_count(0, 0));
  EXPECT_EQ(graphed.opt->step_count(0, 0), 12);
  EXPECT_DOUBLE_EQ(graphed.opt->param_groups()[0].lr, eager.opt->param_groups()[0].lr);
  // The logged losses of every step (the epoch mean) and of the last step.
  ASSERT_TRUE(metrics.count("loss_epoch"));
  EXPECT_EQ(metrics.at("loss_epoch"), eager_metrics.at("loss_epoch"));
  EXPECT_EQ(metrics.at("loss"), eager_metrics.at("loss"));
  // Every step's row of the CSV log (log_every_n_steps = 1).
  auto csv = [&](const char* mode) {
    std::ifstream f(dir.str() + "/" + mode + "/lightning_logs/version_0/metrics.csv");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const std::string on = csv("on"), off = csv("off");
  EXPECT_GT(std::count(on.begin(), on.end(), '\n'), 12);
  EXPECT_EQ(on, off);
}

TEST(StepGraph, AutomaticStaysEagerOnTheCpuAndSaysWhy) {
  ScratchDir dir("step_graph_auto");
  GraphNet m;
  Trainer t(graph_options(dir.str(), CudaGraphs::automatic));
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(t.step_graph().replays(), 0);
  EXPECT_FALSE(t.step_graph().enabled());
  EXPECT_NE(t.step_graph().disabled_reason().find("the CPU"), std::string::npos) << t.step_graph().disabled_reason();
}

// The simple profiler times host actions only, so it keeps the graph: its report shows every replay (and what
// the host does around it) instead of the ops a replay does not run on the host.
TEST(StepGraph, SimpleProfilerKeepsTheGraphAndTimesItsReplays) {
  ScratchDir dir("step_graph_profiler");
  GraphNet m;
  TrainerOptions o = graph_options(dir.str(), CudaGraphs::on);
  o.max_epochs = 1;
  o.profiler = "simple";
  o.profiler_dir = dir.str() + "/prof";
  Trainer t(o);
  t.fit(m, make_loader(16, 4));  // four batches: two warm-up steps, the capture and one replay
  EXPECT_EQ(t.step_graph().replays(), 2);
  EXPECT_TRUE(t.step_graph().enabled()) << t.step_graph().disabled_reason();
  const std::vector<ProfileStat> rows = t.profiler()->action_stats();
  const std::string report = t.profiler()->simple_table();
  auto calls = [&](const std::string& action) -> int64_t {
    const ProfileStat* s = find_stat(rows, "trainer", action);
    return s ? s->calls : -1;
  };
  EXPECT_EQ(calls("[StepGraph]replay"), 1) << report;         // the capture's own first replay is not timed here
  EXPECT_EQ(calls("[StepGraph]replay_logs"), 2) << report;    // the capture's step and the replay
  EXPECT_EQ(calls("[Trainer]end_step"), 4) << report;
  EXPECT_EQ(calls("[TrainModule]training_step"), 3) << report;  // two warm-up steps and the capture
}

TEST(StepGraph, OnRefusesStepsThatCannotBeCaptured) {
  ScratchDir dir("step_graph_refuse");
  struct Case {
    std::function<void(TrainerOptions&)> set;
    std::string expect;
  };
  std::vector<Case> cases = {
      {[](TrainerOptions& o) { o.accumulate_grad_batches = 2; }, "accumulate_grad_batches > 1"},
      {[](TrainerOptions& o) { o.on_nonfinite_loss = NonFiniteLoss::skip; }, "on_nonfinite_loss"},
      {[](TrainerOptions& o) { o.detect_anomaly = true; }, "detect_anomaly"},
      {[](TrainerOptions& o) { o.precision = "16-mixed"; }, "GradScaler"},
      {[](TrainerOptions& o) { o.profiler = "ops"; }, "a profiler that times ops"},
  };
  for (const Case& c : cases) {
    GraphNet m;
    TrainerOptions o = graph_options(dir.str(), CudaGraphs::on);
    c.set(o);
    Trainer t(o);
    const std::string msg = volt::testing::message_of([&] { t.fit(m, make_loader(8, 4)); });
    EXPECT_NE(msg.find("cuda_graphs=on, but the training step cannot be captured"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

TEST(StepGraph, OnReportsAStepThatReadsTheDevice) {
  ScratchDir dir("step_graph_read");
  GraphNet m;
  m.read_host = true;
  Trainer t(graph_options(dir.str(), CudaGraphs::on));
  const std::string msg = volt::testing::message_of([&] { t.fit(m, make_loader(16, 4)); });
  EXPECT_NE(msg.find("capturing the training step failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("item()"), std::string::npos) << msg;
}

TEST(StepGraph, OnReportsAMetricLoggedFromTheStep) {
  ScratchDir dir("step_graph_metric");
  GraphNet m;
  m.log_metric = true;
  Trainer t(graph_options(dir.str(), CudaGraphs::on));
  const std::string msg = volt::testing::message_of([&] { t.fit(m, make_loader(16, 4)); });
  EXPECT_NE(msg.find("a metric object cannot be logged from a captured training step"), std::string::npos) << msg;
}

// The same comparison on a GPU, where the capture is a CUDA graph (skipped without one). The first GPU session
// checks the CUDA side of the capture with it: the private pool, the dynamic blocks, the replays.
TEST(StepGraphCuda, CapturedTrainingMatchesEager) {
  if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status();
  ScratchDir dir("step_graph_cuda");
  manual_seed(11);
  GraphNet eager;
  manual_seed(11);
  GraphNet graphed;
  EXPECT_EQ(fit_two_epochs(eager, dir.str(), "off", CudaGraphs::off, "auto", "gpu").replays, 0);
  EXPECT_EQ(fit_two_epochs(graphed, dir.str(), "on", CudaGraphs::on, "auto", "gpu").replays, 8);
  auto a = graphed.named_parameters(), b = eager.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<double> x = a[i].second.detach().to_vector<double>(), y = b[i].second.detach().to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(x[k], y[k], 1e-5) << a[i].first << "[" << k << "]";
  }
  EXPECT_EQ(graphed.opt->step_count(0, 0), eager.opt->step_count(0, 0));
}
