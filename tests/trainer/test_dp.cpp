// The dp strategy (trainer/strategies/dp.h) in one process with N virtual CPU devices, and the *_step_end hooks:
//  - batch splitting (torch.chunk sizes, every field, fewer replicas than devices) and output gathering;
//  - parity: dp on 2 and 3 devices reaches single_device's parameters on the same batches (f64 Adam: plain, with
//    accumulation, with clipping by norm; 200 steps as a thread sanity run);
//  - the seeds' DP examples: a training_step_end averaging per-device losses from {"loss", "y_hat"} outputs, a
//    validation_step_end logging an accuracy metric from gathered outputs (equal to single_device's value);
//  - uneven batches: slice sizes, and a size-weighted training_step_end matching single_device exactly;
//  - logging from replicas (weighted mean, sum, min, max) and from *_step_end;
//  - BatchNorm running statistics from replica 0 only; dropout streams per replica, repeatable, and dp on one
//    device drawing what single_device draws;
//  - the *_step_end hooks under single_device; refusals (GPUs without CUDA, ddp2 with a GPU id list, num_nodes,
//    manual optimisation, all_gather in a replica), strategy names, effective batch size.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "common/dp_test_module.h"
#include "common/gradcheck.h"
#include <volt/nn/metrics.h>
#include <volt/nn/replica.h>
#include <volt/runtime/cuda_api.h>
#include <volt/trainer/strategies/data_parallel.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/dp.h>
#include <volt/trainer/strategies/registry.h>

using namespace volt;
using test::max_abs_diff;
using test::parameter_values;

namespace {

using Cfg = test::DpRun;

void check_parity(const Cfg& c) {
  const auto single = test::train_dp("single_device", "1", c);
  // Training moved the parameters (so equality below says something).
  test::DpNet fresh;
  ASSERT_GT(max_abs_diff(single, parameter_values(fresh)), 1e-3);
  for (const std::string devices : {"2", "3"}) {
    SCOPED_TRACE("dp devices=" + devices);
    EXPECT_LE(max_abs_diff(test::train_dp("dp", devices, c), single), 1e-12);
  }
}

}  // namespace

// ---- splitting and gathering --------------------------------------------------------------------------------

TEST(DpSplit, ChunkSizesLikeTorchChunk) {
  auto sizes = [](int64_t b, int n) {
    data::Batch batch;
    batch.input = arange(0, static_cast<double>(b), 1, DType::f64).reshape({b, 1});
    std::vector<int64_t> out;
    for (auto& s : detail::split_batch(batch, n)) out.push_back(s.size());
    return out;
  };
  EXPECT_EQ(sizes(6, 2), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(sizes(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));  // ceil(5/4) = 2: three replicas, not four
  EXPECT_EQ(sizes(4, 3), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(sizes(1, 3), (std::vector<int64_t>{1}));
  EXPECT_EQ(sizes(7, 1), (std::vector<int64_t>{7}));
}

TEST(DpSplit, SplitsEveryFieldAlongDimZero) {
  data::Batch b;
  b.input = arange(0, 10, 1, DType::f64).reshape({5, 2});
  b.target = from_vector<int64_t>({0, 1, 2, 3, 4});
  b.fields["mask"] = from_vector<double>({10, 11, 12, 13, 14});
  auto parts = detail::split_batch(b, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].input.contiguous().to_vector<double>(), (std::vector<double>{6, 7, 8, 9}));
  EXPECT_EQ(parts[1].target.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(parts[0].field("mask").contiguous().to_vector<double>(), (std::vector<double>{10, 11, 12}));
  // Unlabelled data: the target stays undefined.
  b.target = Tensor();
  EXPECT_FALSE(detail::split_batch(b, 2)[0].target.defined());
  b.fields["bad"] = zeros({4});
  VOLT_EXPECT_ERROR(detail::split_batch(b, 2), "field \"bad\"", "(4,)", "5 samples");
  VOLT_EXPECT_ERROR(detail::split_batch(b, 0), "at least one device");
}

TEST(DpGather, StacksScalarsAndConcatenatesTheRest) {
  std::vector<StepOutput> outs = {
      {{"loss", scalar_tensor(1.0, DType::f64)}, {"y_hat", from_vector<double>({1, 2, 3, 4}, {2, 2})}},
      {{"loss", scalar_tensor(3.0, DType::f64)}, {"y_hat", from_vector<double>({5, 6}, {1, 2})}}};
  StepOutput g = detail::gather_step_outputs(outs);
  EXPECT_EQ(g.at("loss").shape(), (Shape{2}));
  EXPECT_EQ(g.at("loss").to_vector<double>(), (std::vector<double>{1, 3}));
  EXPECT_EQ(g.at("y_hat").shape(), (Shape{3, 2}));
  EXPECT_EQ(g.at("y_hat").to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  // Gradients flow back into each replica's tensor through the gathered result.
  Tensor a = scalar_tensor(2.0, DType::f64).set_requires_grad(true);
  Tensor b = scalar_tensor(5.0, DType::f64).set_requires_grad(true);
  Tensor loss = detail::gather_step_outputs({{{"loss", a * a}}, {{"loss", b * 3.0}}}).at("loss").mean();
  loss.backward();
  EXPECT_DOUBLE_EQ(a.grad().item(), 2.0);  // d/da (a^2 + 3b) / 2
  EXPECT_DOUBLE_EQ(b.grad().item(), 1.5);
  VOLT_EXPECT_ERROR(detail::gather_step_outputs({{{"loss", a}}, {{"x", b}}}), "replica 1", "\"x\"", "\"loss\"");
  VOLT_EXPECT_ERROR(detail::gather_step_outputs({{{"loss", a}}, {{"loss", Tensor()}}}), "\"loss\"", "undefined");
  VOLT_EXPECT_ERROR(detail::gather_step_outputs({{{"p", a}}, {{"p", from_vector<double>({1.0})}}}), "\"p\"", "0-d");
  EXPECT_FALSE(detail::gather_step_outputs({{{"loss", Tensor()}}, {{"loss", Tensor()}}}).at("loss").defined());
}

// ---- parity with single_device ------------------------------------------------------------------------------

TEST(Dp, MatchesSingleDevice) { check_parity({}); }
TEST(Dp, MatchesSingleDeviceWithAccumulation) { check_parity({.accumulate = 3}); }
TEST(Dp, MatchesSingleDeviceWithClipping) {
  const auto clipped = test::train_dp("single_device", "1", {.clip = 0.05});
  const auto free = test::train_dp("single_device", "1", {});
  ASSERT_GT(max_abs_diff(clipped, free), 1e-4);  // the clip bites
  check_parity({.clip = 0.05});
}
// Thread sanity: many steps with replicas on 3 threads (also run under ASan/UBSan in CI).
TEST(Dp, ManyStepsMatchSingleDevice) {
  const Cfg c{.batch = 6, .n = 120, .epochs = 10};  // 200 steps
  EXPECT_LE(max_abs_diff(test::train_dp("dp", "3", c), test::train_dp("single_device", "1", c)), 1e-11);
}

// ---- the seeds' DP examples ---------------------------------------------------------------------------------

// Example 2: training_step returns {"loss", "y_hat"}; training_step_end receives the per-device losses stacked
// and the predictions concatenated, averages the losses and keeps the predictions.
struct CustomReduction : test::DpNet {
  std::vector<Shape> loss_shapes, yhat_shapes;
  std::vector<int64_t> preds;
  std::mutex mu;
  std::set<int> replicas_seen;
  std::set<std::thread::id> threads_seen;
  StepOutput training_step_outputs(const Batch& b, int64_t) override {
    {
      std::lock_guard<std::mutex> l(mu);
      replicas_seen.insert(nn::replica_index());
      threads_seen.insert(std::this_thread::get_id());
    }
    Tensor y_hat = logits(b.input);
    return {{"loss", cross_entropy(y_hat, b.target)}, {"y_hat", y_hat.detach()}};
  }
  Tensor training_step_end(const StepOutput& out) override {
    loss_shapes.push_back(out.at("loss").shape());
    yhat_shapes.push_back(out.at("y_hat").shape());
    Tensor p = argmax(softmax(out.at("y_hat"), 1), 1);
    for (int64_t v : p.to_vector<int64_t>()) preds.push_back(v);
    return out.at("loss").mean();
  }
};

TEST(Dp, TrainingStepEndAveragesPerDeviceLosses) {
  CustomReduction dp, single;
  const Cfg c{.batch = 16, .n = 64, .epochs = 1};
  const auto p_dp = test::train_dp<CustomReduction>("dp", "2", c, false, &dp);
  const auto p_single = test::train_dp<CustomReduction>("single_device", "1", c, false, &single);
  ASSERT_EQ(dp.loss_shapes.size(), 4u);
  for (size_t i = 0; i < dp.loss_shapes.size(); ++i) {
    EXPECT_EQ(dp.loss_shapes[i], (Shape{2}));       // one loss per device
    EXPECT_EQ(dp.yhat_shapes[i], (Shape{16, 3}));   // 2 x 8 predictions
    EXPECT_EQ(single.loss_shapes[i], (Shape{}));    // single device: the step's output unchanged
  }
  EXPECT_EQ(dp.replicas_seen, (std::set<int>{0, 1}));
  EXPECT_EQ(dp.threads_seen.size(), 2u);  // concurrently on two threads
  EXPECT_EQ(dp.preds, single.preds);
  EXPECT_LE(max_abs_diff(p_dp, p_single), 1e-12);
}

// Example 1: validation_step returns (pred, y) per device; validation_step_end updates and logs an accuracy
// metric on the gathered outputs. Also a loss logged inside the replicas (merged as a size-weighted mean).
struct GatheredAccuracy : test::DpNet {
  metrics::Accuracy acc{{.num_classes = 3}};
  std::vector<int64_t> gathered_sizes;
  std::atomic<int64_t> largest_slice{0};
  int64_t correct = 0, seen = 0;  // counted by hand from the gathered outputs
  StepOutput validation_step_outputs(const Batch& b, int64_t) override {
    int64_t prev = largest_slice.load();
    while (prev < b.size() && !largest_slice.compare_exchange_weak(prev, b.size())) {
    }
    Tensor y_hat = logits(b.input);
    log("val_loss", cross_entropy(y_hat, b.target));
    return {{"pred", argmax(softmax(y_hat, 1), 1)}, {"y", b.target}};
  }
  void validation_step_end(const StepOutput& out) override {
    gathered_sizes.push_back(out.at("pred").size(0));
    const auto p = out.at("pred").to_vector<int64_t>(), y = out.at("y").to_vector<int64_t>();
    for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i] ? 1 : 0;
    seen += static_cast<int64_t>(p.size());
    acc.update(out.at("pred"), out.at("y"));
    log("val_acc", acc, {.prog_bar = true});
  }
};

TEST(Dp, ValidationStepEndLogsMetricFromGatheredOutputs) {
  auto validate = [](const std::string& strategy, const std::string& devices, GatheredAccuracy& m) {
    Trainer t(test::dp_options(strategy, devices));
    auto loader = std::make_shared<data::DataLoader>(test::dp_data(30), data::DataLoaderOptions{.batch_size = 7});
    return t.validate(m, loader).at(0);
  };
  GatheredAccuracy dp, single;
  for (GatheredAccuracy* m : {&dp, &single}) {
    NoGradGuard ng;
    m->b2.copy_(from_vector<double>({0.4, -0.2, 0.3}));  // some classes right, some wrong: an accuracy that tells
  }
  const MetricMap r_dp = validate("dp", "2", dp), r_single = validate("single_device", "1", single);
  EXPECT_EQ(dp.gathered_sizes, (std::vector<int64_t>{7, 7, 7, 7, 2}));  // the whole batch reaches step_end
  EXPECT_EQ(dp.largest_slice.load(), 4);      // batch 7 over 2 devices: 4 + 3
  EXPECT_EQ(single.largest_slice.load(), 7);
  ASSERT_TRUE(r_dp.count("val_acc") && r_dp.count("val_loss"));
  EXPECT_EQ(r_dp.at("val_acc"), r_single.at("val_acc"));
  EXPECT_EQ(dp.seen, 30);
  EXPECT_GT(dp.correct, 0);
  EXPECT_LT(dp.correct, 30);
  EXPECT_NEAR(r_dp.at("val_acc"), static_cast<double>(dp.correct) / 30.0, 1e-7);  // an f32 metric
  EXPECT_NEAR(r_dp.at("val_loss"), r_single.at("val_loss"), 1e-13);
}

// ---- uneven batches -----------------------------------------------------------------------------------------

// training_step returns the per-sample loss sum; training_step_end divides by the batch: the single-device mean
// loss whatever the slice sizes, so dp matches single_device exactly on uneven batches too.
struct SizeWeighted : test::DpNet {
  std::vector<std::vector<int64_t>> slices;  // per step: each replica's slice size
  std::mutex mu;
  std::vector<int64_t> current;
  StepOutput training_step_outputs(const Batch& b, int64_t) override {
    Tensor y_hat = logits(b.input);
    return {{"loss", cross_entropy(y_hat, b.target, Reduction::Sum)},
            {"n", full({1}, static_cast<double>(b.size()), DType::f64)}};
  }
  Tensor training_step_end(const StepOutput& out) override {
    const Tensor& n = out.at("n");
    std::vector<int64_t> sizes;
    for (double v : n.to_vector<double>()) sizes.push_back(static_cast<int64_t>(v));
    slices.push_back(sizes);
    return out.at("loss").sum() / n.sum().item();
  }
};

TEST(Dp, UnevenLastBatch) {
  SizeWeighted dp, single;
  const Cfg c{.batch = 5, .n = 22, .epochs = 1};  // batches 5, 5, 5, 5, 2
  const auto p_dp = test::train_dp<SizeWeighted>("dp", "3", c, false, &dp);
  const auto p_single = test::train_dp<SizeWeighted>("single_device", "1", c, false, &single);
  const std::vector<std::vector<int64_t>> expected = {{2, 2, 1}, {2, 2, 1}, {2, 2, 1}, {2, 2, 1}, {1, 1}};
  EXPECT_EQ(dp.slices, expected);
  EXPECT_LE(max_abs_diff(p_dp, p_single), 1e-12);
  // A batch smaller than the devices runs on fewer replicas: one sample, one replica.
  SizeWeighted tiny;
  test::train_dp<SizeWeighted>("dp", "3", {.batch = 1, .n = 2, .epochs = 1}, false, &tiny);
  EXPECT_EQ(tiny.slices, (std::vector<std::vector<int64_t>>{{1}, {1}}));
}

TEST(Dp, DefaultStepEndIsTheMeanOfPerDeviceLosses) {
  // Uneven slices (3 and 2 samples): the default reduction averages the two slice losses, as upstream (not the
  // mean over the 5 samples). Check the loss the Trainer backpropagates.
  struct Probe : test::DpNet {
    std::vector<double> losses, expected;
    Tensor training_step_end(const StepOutput& out) override {
      Tensor l = TrainModule::training_step_end(out);
      losses.push_back(l.item());
      const std::vector<double> per = out.at("loss").to_vector<double>();
      expected.push_back((per[0] + per[1]) / 2);
      EXPECT_EQ(l.shape(), Shape{});  // the mean of the (2,) losses
      return l;
    }
  } m;
  test::train_dp<Probe>("dp", "2", {.batch = 5, .n = 10, .epochs = 1}, false, &m);
  ASSERT_EQ(m.losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_DOUBLE_EQ(m.losses[i], m.expected[i]);
}

// ---- logging ------------------------------------------------------------------------------------------------

struct LoggingNet : test::DpNet {
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = cross_entropy(logits(b.input), b.target);
    log("train_loss", loss, {.on_step = false, .on_epoch = true});
    log("seen", static_cast<double>(b.size()), {.on_step = false, .on_epoch = true, .reduce_fx = "sum"});
    log("first_max", max(b.input.narrow(1, 0, 1)), {.on_step = false, .on_epoch = true, .reduce_fx = "max"});
    log("first_min", min(b.input.narrow(1, 0, 1)), {.on_step = false, .on_epoch = true, .reduce_fx = "min"});
    return loss;
  }
  Tensor training_step_end(const StepOutput& out) override {
    log("replicas", static_cast<double>(out.at("loss").numel()), {.on_step = false, .on_epoch = true, .reduce_fx = "max"});
    return TrainModule::training_step_end(out);
  }
};

TEST(Dp, ReplicaLogsAreMergedOnTheCallingThread) {
  auto run = [](const std::string& strategy, const std::string& devices) {
    LoggingNet m;
    auto loader = std::make_shared<data::DataLoader>(test::dp_data(20), data::DataLoaderOptions{.batch_size = 6});
    TrainerOptions o = test::dp_options(strategy, devices);
    o.max_epochs = 1;
    Trainer trainer(o);
    trainer.fit(m, loader);
    return trainer.callback_metrics();
  };
  const MetricMap dp = run("dp", "3"), single = run("single_device", "1");
  EXPECT_EQ(dp.at("seen"), 20.0);  // sum over replicas and batches: every sample once
  EXPECT_EQ(dp.at("first_max"), single.at("first_max"));
  EXPECT_EQ(dp.at("first_min"), single.at("first_min"));
  EXPECT_NEAR(dp.at("train_loss"), single.at("train_loss"), 1e-12);  // batch-size weighted: the batch's mean
  EXPECT_EQ(dp.at("replicas"), 3.0);
  EXPECT_EQ(single.at("replicas"), 1.0);
}

// ---- module state and random streams ------------------------------------------------------------------------

TEST(Dp, BatchNormRunningStatsComeFromReplicaZero) {
  TrainerOptions o = test::dp_options("dp", "2");
  o.max_steps = 1;
  Trainer t(o);
  test::BnNet m;
  auto data = test::dp_data(8);
  auto loader = std::make_shared<data::DataLoader>(data, data::DataLoaderOptions{.batch_size = 8});
  t.fit(m, loader);
  // The reference: one BatchNorm stepped on replica 0's slice (the first 4 samples) only.
  nn::BatchNorm1d ref(4);
  ref.to(DType::f64);
  ref.train();
  ref.forward(data->inputs().narrow(0, 0, 4));
  EXPECT_LE(max_abs_diff({m.bn.running_mean.to_vector<double>(), m.bn.running_var.to_vector<double>()},
                            {ref.running_mean.to_vector<double>(), ref.running_var.to_vector<double>()}),
            1e-15);
  EXPECT_EQ(m.bn.num_batches_tracked.item<int64_t>(), 1);
  // Not the statistics of the whole batch.
  nn::BatchNorm1d whole(4);
  whole.to(DType::f64);
  whole.train();
  whole.forward(data->inputs());
  EXPECT_GT(max_abs_diff({m.bn.running_mean.to_vector<double>()}, {whole.running_mean.to_vector<double>()}), 1e-3);
}

TEST(Dp, ReplicaIndexOutsideReplicasIsZero) {
  EXPECT_EQ(nn::replica_index(), 0);
  {
    nn::ReplicaScope s(2);
    EXPECT_EQ(nn::replica_index(), 2);
  }
  EXPECT_EQ(nn::replica_index(), 0);
  VOLT_EXPECT_ERROR(nn::ReplicaScope(-1), "replica index", "-1");
}

// Each replica draws its own dropout mask: identical slices, different masks; the whole run repeats exactly.
struct MaskProbe : test::DpNet {
  std::mutex mu;
  std::map<int, std::vector<double>> masks;  // first step: replica -> mask
  StepOutput training_step_outputs(const Batch& b, int64_t idx) override {
    Tensor mask = dropout(ones({8}, DType::f64), 0.5, true);
    if (idx == 0) {
      std::lock_guard<std::mutex> l(mu);
      masks[nn::replica_index()] = mask.to_vector<double>();
    }
    return test::DpNet::training_step_outputs(b, idx);
  }
};

TEST(Dp, DropoutStreamsPerReplicaAreRepeatable) {
  const Cfg c{.batch = 6, .n = 24, .epochs = 2, .dropout = 0.5};
  MaskProbe a, b;
  const auto pa = test::train_dp<MaskProbe>("dp", "3", c, false, &a);
  const auto pb = test::train_dp<MaskProbe>("dp", "3", c, false, &b);
  EXPECT_EQ(pa, pb);  // bit for bit, whatever the threads' timing
  ASSERT_EQ(a.masks.size(), 3u);
  EXPECT_NE(a.masks[0], a.masks[1]);
  EXPECT_NE(a.masks[1], a.masks[2]);
  EXPECT_EQ(a.masks, b.masks);
  // One device: dp runs on the calling thread with the global generator, as single_device.
  EXPECT_EQ(test::train_dp("dp", "1", c), test::train_dp("single_device", "1", c));
}

// ---- *_step_end under single_device -------------------------------------------------------------------------

TEST(StepEnd, SingleDeviceGetsTheStepOutputsUnchanged) {
  struct M : test::DpNet {
    std::vector<std::string> calls;
    StepOutput test_step_outputs(const Batch& b, int64_t) override {
      calls.push_back("test_step");
      return {{"y_hat", logits(b.input)}, {"y", b.target}};
    }
    void test_step_end(const StepOutput& out) override {
      calls.push_back("test_step_end");
      EXPECT_EQ(out.at("y_hat").shape(), (Shape{5, 3}));
      log("test_loss", cross_entropy(out.at("y_hat"), out.at("y")));
    }
    void validation_step(const Batch& b, int64_t) override { calls.push_back("validation_step"); }
    void validation_step_end(const StepOutput& out) override {
      calls.push_back("validation_step_end");
      EXPECT_TRUE(out.empty());  // the void step returns no outputs
    }
  } m;
  Trainer t(test::dp_options("single_device", "1"));
  auto loader = std::make_shared<data::DataLoader>(test::dp_data(5), data::DataLoaderOptions{.batch_size = 5});
  MetricMap r = t.test(m, loader).at(0);
  EXPECT_TRUE(r.count("test_loss"));
  t.validate(m, loader);
  EXPECT_EQ(m.calls, (std::vector<std::string>{"test_step", "test_step_end", "validation_step", "validation_step_end"}));
}

TEST(StepEnd, DefaultTrainingStepEndNeedsALoss) {
  struct M : test::DpNet {
    StepOutput training_step_outputs(const Batch& b, int64_t) override { return {{"y_hat", logits(b.input)}}; }
  } m;
  TrainerOptions o = test::dp_options("single_device", "1");
  o.max_steps = 1;
  Trainer t(o);
  auto loader = std::make_shared<data::DataLoader>(test::dp_data(4), data::DataLoaderOptions{.batch_size = 4});
  VOLT_EXPECT_ERROR(t.fit(m, loader), "DpNet::training_step_end", "no \"loss\"");
}

// ---- refusals, names, sizes ---------------------------------------------------------------------------------

TEST(Dp, GpusAreCheckedAndDdp2TakesAGpuCount) {
  DeviceSelection gpus;
  gpus.accelerator = "gpu";
  gpus.device_ids = {0, 1};
  gpus.num_processes = 2;
  if (!cuda_available()) {  // several GPUs run module replicas (test_dp_replicas.cpp); here: no GPU to run on
    VOLT_EXPECT_ERROR(make_strategy("dp", gpus), "dp: device cuda:0 was requested");
    VOLT_EXPECT_ERROR(make_strategy("ddp2", gpus), "ddp2: device cuda:0 was requested");
  }
  gpus.device_ids = {1, 3};  // checked before any process group starts
  VOLT_EXPECT_ERROR(make_strategy("ddp2", gpus), "ddp2", "GPU count", "not a list of GPU ids");
  DeviceSelection cpu = parse_devices("cpu", "2", 0);
  cpu.num_nodes = 2;
  VOLT_EXPECT_ERROR(make_strategy("dp", cpu), "num_nodes=2", "ddp2");
}

TEST(Dp, StrategyNamesAndDevicesWithoutProcesses) {
  const auto& names = strategy_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "dp"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "ddp2"), names.end());
  auto s = make_strategy("dp", parse_devices("cpu", "4", 0));
  auto* dp = dynamic_cast<DPStrategy*>(s.get());
  ASSERT_NE(dp, nullptr);
  EXPECT_EQ(dp->devices(), 4);
  EXPECT_EQ(dp->world_size(), 1);  // one process: no workers started
  EXPECT_EQ(dp->root_device(), kCPU);
  // Effective batch: the loader's batch (split over the devices), x accumulation.
  TrainerOptions o = test::dp_options("dp", "4");
  o.accumulate_grad_batches = 2;
  Trainer t(o);
  EXPECT_EQ(t.effective_batch_size(16), 32);
}

TEST(Dp, RefusesManualOptimisationAndGatherInReplicas) {
  struct Manual : test::DpNet {
    Manual() { automatic_optimization = false; }
  } manual;
  auto loader = std::make_shared<data::DataLoader>(test::dp_data(8), data::DataLoaderOptions{.batch_size = 4});
  {
    Trainer t(test::dp_options("dp", "2"));
    VOLT_EXPECT_ERROR(t.fit(manual, loader), "strategy=\"dp\"", "automatic optimisation", "ddp");
  }
  struct Gather : test::DpNet {
    Tensor training_step(const Batch& b, int64_t i) override {
      all_gather(b.input);
      return test::DpNet::training_step(b, i);
    }
  } gather;
  Trainer t(test::dp_options("dp", "2"));
  VOLT_EXPECT_ERROR(t.fit(gather, loader), "all_gather", "training_step_end");
}

TEST(Dp, ReplicaErrorsReachTheCaller) {
  struct Failing : test::DpNet {
    Tensor training_step(const Batch& b, int64_t i) override {
      VOLT_CHECK(nn::replica_index() != 1, "replica 1 failed on purpose");
      return test::DpNet::training_step(b, i);
    }
  } m;
  Trainer t(test::dp_options("dp", "2"));
  auto loader = std::make_shared<data::DataLoader>(test::dp_data(8), data::DataLoaderOptions{.batch_size = 4});
  VOLT_EXPECT_ERROR(t.fit(m, loader), "replica 1 failed on purpose");
}

// Thread sanity of what a replica's forward touches besides the tensors: the profiler's recorder (ranges from
// every replica thread), anomaly detection (its checks run in the replicas), and the pool's threads being kept
// from step to step (the trace names exactly one extra thread for 2 devices).
TEST(Dp, ProfilerAndAnomalyDetectionSeeEveryReplica) {
  auto run = [](const std::string& strategy, const std::string& devices, std::string* trace) {
    TrainerOptions o = test::dp_options(strategy, devices);
    o.max_steps = 12;
    o.detect_anomaly = true;
    o.profiler = "ops";
    o.default_root_dir = (std::filesystem::temp_directory_path() / ("volt_dp_profile_" + std::to_string(::getpid()))).string();
    Trainer t(o);
    test::DpNet m;
    auto loader = std::make_shared<data::DataLoader>(test::dp_data(48), data::DataLoaderOptions{.batch_size = 4});
    ::testing::internal::CaptureStdout();
    t.fit(m, loader);
    ::testing::internal::GetCapturedStdout();
    if (trace) *trace = t.profiler()->chrome_trace_json();
    std::filesystem::remove_all(o.default_root_dir);
    return parameter_values(m);
  };
  std::string trace;
  const auto dp = run("dp", "2", &trace);
  EXPECT_LE(max_abs_diff(dp, run("single_device", "1", nullptr)), 1e-12);
  EXPECT_NE(trace.find("\"name\":\"thread 1\""), std::string::npos);   // replica 1's ranges
  EXPECT_EQ(trace.find("\"name\":\"thread 2\""), std::string::npos);   // the same worker thread every step
}

TEST(DpPool, RunsEveryReplicaOnItsOwnThreadEveryTime) {
  detail::ReplicaPool pool(3);
  std::vector<std::thread::id> first(4), again(4);
  pool.run(4, [&](int r) { first[static_cast<size_t>(r)] = std::this_thread::get_id(); });
  for (int step = 0; step < 200; ++step) {
    std::atomic<int> ran{0};
    const int n = 1 + step % 4;  // fewer replicas than workers in some steps
    pool.run(n, [&](int r) {
      again[static_cast<size_t>(r)] = std::this_thread::get_id();
      ran.fetch_add(1);
    });
    ASSERT_EQ(ran.load(), n);
    for (int r = 0; r < n; ++r) EXPECT_EQ(again[static_cast<size_t>(r)], first[static_cast<size_t>(r)]) << "replica " << r;
  }
  EXPECT_EQ(first[0], std::this_thread::get_id());
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
}

// Grad mode and autocast follow the calling thread into every replica: on in training (bf16-mixed), grad off in
// validation.
TEST(Dp, ReplicasInheritGradModeAndAutocast) {
  struct Probe : test::DpNet {
    std::mutex mu;
    std::set<std::tuple<int, bool, bool, bool>> seen;  // (replica, training, grad enabled, autocast enabled)
    void note() {
      std::lock_guard<std::mutex> l(mu);
      seen.insert({nn::replica_index(), is_training(), autograd::grad_enabled(), autocast_enabled()});
    }
    Tensor training_step(const Batch& b, int64_t i) override {
      note();
      return test::DpNet::training_step(b, i);
    }
    void validation_step(const Batch& b, int64_t) override { note(); }
  } m;
  TrainerOptions o = test::dp_options("dp", "2");
  o.max_steps = 2;
  o.precision = "bf16-mixed";
  o.limit_val_batches = 1;
  Trainer t(o);
  auto loader = std::make_shared<data::DataLoader>(test::dp_data(8), data::DataLoaderOptions{.batch_size = 4});
  t.fit(m, loader, loader);
  const std::set<std::tuple<int, bool, bool, bool>> expected = {
      {0, true, true, true}, {1, true, true, true}, {0, false, false, true}, {1, false, false, true}};
  EXPECT_EQ(m.seen, expected);
  EXPECT_FALSE(autocast_enabled());
}
