// dp with a module replica per device (TrainModule::make_replica; TrainerOptions::dp_replicas on virtual CPU
// devices runs the code path that several GPUs take, trainer/strategies/dp.h):
//  - parity: replicas on 2 and 3 devices reach single_device's parameters (f64 Adam: plain, with accumulation,
//    with clipping by norm), and the shared-module dp's with dropout; runs repeat bit for bit;
//  - the replicas hold their own storage and start every step with the root's current values; they follow the
//    root's eval mode (validation with dropout gives single_device's loss);
//  - the seeds' training_step_end / validation_step_end examples give single_device's values;
//  - BatchNorm running statistics come from replica 0 (the root) only;
//  - errors: a replica of another architecture (naming the parameter), a module without make_replica asked for
//    replicas, dp_replicas under another strategy.
#include <gtest/gtest.h>

#include "common/dp_test_module.h"
#include "common/gradcheck.h"
#include <volt/nn/metrics.h>
#include <volt/trainer/strategies/dp.h>

using namespace volt;
using test::max_abs_diff;
using test::parameter_values;

namespace {

using Cfg = test::DpRun;
using Net = test::ReplicableNet;  // the default model here: make_replica() overridden

void check_parity(const Cfg& c) {
  const auto single = test::train_dp<Net>("single_device", "1", c, false);
  test::DpNet fresh;
  ASSERT_GT(max_abs_diff(single, parameter_values(fresh)), 1e-3);  // training moved the parameters
  for (const int devices : {2, 3}) {
    SCOPED_TRACE("dp devices=" + std::to_string(devices));
    test::ReplicableNet m;
    EXPECT_LE(max_abs_diff(test::train_dp<Net>("dp", std::to_string(devices), c, true, &m), single), 1e-12);
    // Every step ran devices - 1 replicas (batches of 6 split 3+3 or 2+2+2), each on its own storage, starting
    // from the root's current values.
    const int64_t steps = c.epochs * c.n / c.batch;
    EXPECT_EQ(m.replica_steps, steps * (devices - 1));
    EXPECT_FALSE(m.shared_storage);
    EXPECT_EQ(m.max_start_diff, 0.0);
  }
}

}  // namespace

TEST(DpReplicas, MatchSingleDevice) { check_parity({}); }
TEST(DpReplicas, MatchSingleDeviceWithAccumulation) { check_parity({.accumulate = 3}); }
TEST(DpReplicas, MatchSingleDeviceWithClipping) {
  const auto clipped = test::train_dp<Net>("single_device", "1", {.clip = 0.05}, false);
  const auto free = test::train_dp<Net>("single_device", "1", {}, false);
  ASSERT_GT(max_abs_diff(clipped, free), 1e-4);  // the clip bites
  check_parity({.clip = 0.05});
}

// Replicas draw the same dropout streams as the shared module (replica r's stream does not depend on which
// module runs it), and repeat bit for bit whatever the threads' timing.
TEST(DpReplicas, RepeatableAndEqualToSharedModuleWithDropout) {
  const Cfg c{.batch = 6, .n = 24, .epochs = 2, .dropout = 0.5};
  const auto a = test::train_dp<Net>("dp", "3", c, true), b = test::train_dp<Net>("dp", "3", c, true);
  EXPECT_EQ(a, b);
  const auto shared = test::train_dp<Net>("dp", "3", c, false);
  EXPECT_LE(max_abs_diff(a, shared), 1e-12);
  const auto no_dropout = test::train_dp<Net>("dp", "3", {.batch = 6, .n = 24, .epochs = 2}, true);
  EXPECT_GT(max_abs_diff(a, no_dropout), 1e-6);  // dropout acts
}

namespace {

// The seeds' example 2: {"loss", "y_hat"} per replica, averaged in training_step_end on the root.
struct LossAndPredictions : test::DpNet {
  std::vector<Shape> loss_shapes;
  std::vector<int64_t> preds;
  StepOutput training_step_outputs(const Batch& b, int64_t) override {
    Tensor y_hat = logits(b.input);
    return {{"loss", cross_entropy(y_hat, b.target)}, {"y_hat", y_hat.detach()}};
  }
  Tensor training_step_end(const StepOutput& out) override {
    loss_shapes.push_back(out.at("loss").shape());
    for (int64_t v : argmax(softmax(out.at("y_hat"), 1), 1).to_vector<int64_t>()) preds.push_back(v);
    return out.at("loss").mean();
  }
};

}  // namespace

TEST(DpReplicas, TrainingStepEndAveragesPerDeviceLosses) {
  test::Replicable<LossAndPredictions> dp;
  LossAndPredictions single;
  const Cfg c{.batch = 16, .n = 64, .epochs = 1};
  const auto p_dp = test::train_dp("dp", "2", c, true, &dp);
  const auto p_single = test::train_dp("single_device", "1", c, false, &single);
  ASSERT_EQ(dp.loss_shapes.size(), 4u);
  for (const Shape& s : dp.loss_shapes) EXPECT_EQ(s, (Shape{2}));
  EXPECT_EQ(dp.replica_steps, 4);
  EXPECT_EQ(dp.preds, single.preds);
  EXPECT_LE(max_abs_diff(p_dp, p_single), 1e-12);
}

namespace {

// The seeds' example 1: (pred, y) per replica, an accuracy metric updated in validation_step_end on the root;
// a loss logged in the replicas. With dropout: the replicas follow the root into eval mode.
struct ValAccuracy : test::DpNet {
  metrics::Accuracy acc{{.num_classes = 3}};
  std::vector<int64_t> gathered;
  StepOutput validation_step_outputs(const Batch& b, int64_t) override {
    Tensor y_hat = logits(b.input);
    log("val_loss", cross_entropy(y_hat, b.target));
    return {{"pred", argmax(softmax(y_hat, 1), 1)}, {"y", b.target}};
  }
  void validation_step_end(const StepOutput& out) override {
    gathered.push_back(out.at("pred").size(0));
    acc.update(out.at("pred"), out.at("y"));
    log("val_acc", acc);
  }
};

}  // namespace

TEST(DpReplicas, ValidationStepEndLogsMetricFromGatheredOutputs) {
  auto validate = [](const std::string& strategy, bool replicas, ValAccuracy& m) {
    TrainerOptions o = test::dp_options(strategy, strategy == "dp" ? "2" : "1");
    o.dp_replicas = replicas;
    Trainer t(o);
    auto loader = std::make_shared<data::DataLoader>(test::dp_data(30), data::DataLoaderOptions{.batch_size = 7});
    return t.validate(m, loader).at(0);
  };
  test::Replicable<ValAccuracy> dp;
  ValAccuracy single;
  for (ValAccuracy* m : {static_cast<ValAccuracy*>(&dp), &single}) {
    NoGradGuard ng;
    m->b2.copy_(from_vector<double>({0.4, -0.2, 0.3}));  // some classes right, some wrong
    m->dropout_p = 0.5;                                   // inactive in eval mode, on every replica
  }
  const MetricMap r_dp = validate("dp", true, dp), r_single = validate("single_device", false, single);
  EXPECT_EQ(dp.gathered, (std::vector<int64_t>{7, 7, 7, 7, 2}));
  EXPECT_EQ(dp.replica_steps, 5);
  EXPECT_EQ(dp.max_start_diff, 0.0);  // b2 was changed after construction: the replica got the root's value
  ASSERT_TRUE(r_dp.count("val_acc") && r_dp.count("val_loss"));
  EXPECT_GT(r_single.at("val_acc"), 0.0);
  EXPECT_LT(r_single.at("val_acc"), 1.0);
  EXPECT_EQ(r_dp.at("val_acc"), r_single.at("val_acc"));
  EXPECT_NEAR(r_dp.at("val_loss"), r_single.at("val_loss"), 1e-13);
}

// BatchNorm: the root (replica 0) keeps the running statistics of its slice; the other replicas' are lost.
TEST(DpReplicas, BatchNormRunningStatsComeFromReplicaZero) {
  TrainerOptions o = test::dp_options("dp", "2");
  o.max_steps = 2;
  o.dp_replicas = true;
  Trainer t(o);
  test::BnNet m;
  auto data = test::dp_data(8);
  auto loader = std::make_shared<data::DataLoader>(data, data::DataLoaderOptions{.batch_size = 4});
  t.fit(m, loader);
  // Two steps: the root saw samples 0-1 then 4-5 (the first half of each batch of 4).
  nn::BatchNorm1d ref(4);
  ref.to(DType::f64);
  ref.train();
  ref.forward(data->inputs().narrow(0, 0, 2));
  ref.forward(data->inputs().narrow(0, 4, 2));
  EXPECT_LE(max_abs_diff({m.bn.running_mean.to_vector<double>(), m.bn.running_var.to_vector<double>()},
                         {ref.running_mean.to_vector<double>(), ref.running_var.to_vector<double>()}),
            1e-15);
  EXPECT_EQ(m.bn.num_batches_tracked.item<int64_t>(), 2);
}

// ---- errors -------------------------------------------------------------------------------------------------

namespace {

// make_replica returns another architecture: w1 (4, 7) instead of (4, 6), or a renamed parameter.
struct WrongShape : test::DpNet {
  struct Replica : TrainModule {
    Tensor w1 = register_parameter("w1", zeros({4, 7}, DType::f64));
  };
  std::unique_ptr<TrainModule> make_replica() const override { return std::make_unique<Replica>(); }
};
struct WrongName : test::DpNet {
  struct Replica : TrainModule {
    Tensor w1 = register_parameter("w1", zeros({4, 6}, DType::f64));
    Tensor bias = register_parameter("bias", zeros({6}, DType::f64));
  };
  std::unique_ptr<TrainModule> make_replica() const override { return std::make_unique<Replica>(); }
};

}  // namespace

TEST(DpReplicas, ReplicaOfAnotherArchitectureIsAnError) {
  WrongShape shape;
  VOLT_EXPECT_ERROR(test::train_dp<WrongShape>("dp", "2", {}, true, &shape), "make_replica()", "parameter \"w1\"",
                    "(4, 7)", "(4, 6)", "same architecture");
  WrongName name;
  VOLT_EXPECT_ERROR(test::train_dp<WrongName>("dp", "2", {}, true, &name), "parameter \"bias\"", "\"b1\"");
}

TEST(DpReplicas, ModuleWithoutMakeReplicaIsAClearError) {
  test::DpNet m;
  VOLT_EXPECT_ERROR(test::train_dp<test::DpNet>("dp", "2", {}, true, &m), "strategy=\"dp\"", "DpNet::make_replica()",
                    "returns nullptr", "override it", "strategy=\"ddp\"");
  // Without the option the shared module runs as before, replicable or not.
  EXPECT_LE(max_abs_diff(test::train_dp<test::DpNet>("dp", "2", {}, false), test::train_dp<Net>("dp", "2", {}, false)),
            0.0);
}

TEST(DpReplicas, OptionOfDpAndDdp2Only) {
  TrainerOptions o = test::dp_options("single_device", "1");
  o.dp_replicas = true;
  VOLT_EXPECT_ERROR(Trainer{o}, "dp_replicas", "\"single_device\"");
}
