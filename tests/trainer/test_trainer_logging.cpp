// log() semantics: defaults per hook, errors, batch-size-weighted epoch means, reduce_fx, forked names,
// the CSV logger and metric objects.
#include <cmath>

#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {
// Runs one epoch over 10 samples in batches of 4, 4, 2 with `step` called inside training_step.
MetricMap run_epoch(const std::string& dir, std::function<void(TinyModule&, const Batch&, int64_t)> step,
                    Trainer** out = nullptr, int64_t epochs = 1) {
  TinyModule m;
  m.on_train_step = [&](TinyModule& mm, const Batch& b, int64_t i, const Tensor&) { step(mm, b, i); };
  auto o = quiet(dir);
  o.max_epochs = epochs;
  static std::unique_ptr<Trainer> keep;
  keep = std::make_unique<Trainer>(o);
  keep->fit(m, make_loader(10, 4));
  if (out) *out = keep.get();
  return keep->callback_metrics();
}
}  // namespace

TEST(TrainerLogging, EpochMeanIsWeightedByBatchSize) {
  ScratchDir dir("wmean");
  auto cm = run_epoch(dir.str(), [](TinyModule& m, const Batch&, int64_t i) {
    m.log("v", static_cast<double>(i + 1), {.on_step = false, .on_epoch = true});
    m.log("t", full({}, static_cast<double>(i + 1)), {.on_step = false, .on_epoch = true});
  });
  // (1*4 + 2*4 + 3*2) / 10 = 1.8, not the unweighted 2.0.
  EXPECT_DOUBLE_EQ(cm.at("v"), 1.8);
  EXPECT_DOUBLE_EQ(cm.at("t"), 1.8);
}

TEST(TrainerLogging, ExplicitBatchSizeAndReduceFx) {
  ScratchDir dir("reduce");
  auto cm = run_epoch(dir.str(), [](TinyModule& m, const Batch&, int64_t i) {
    double v = static_cast<double>(i + 1);
    m.log("eq", v, {.on_step = false, .on_epoch = true, .batch_size = 1});
    m.log("s", v, {.on_step = false, .on_epoch = true, .reduce_fx = "sum"});
    m.log("mx", full({}, v), {.on_step = false, .on_epoch = true, .reduce_fx = "max"});
    m.log("mn", -v, {.on_step = false, .on_epoch = true, .reduce_fx = "min"});
  });
  EXPECT_DOUBLE_EQ(cm.at("eq"), 2.0);
  EXPECT_DOUBLE_EQ(cm.at("s"), 6.0);
  EXPECT_DOUBLE_EQ(cm.at("mx"), 3.0);
  EXPECT_DOUBLE_EQ(cm.at("mn"), -3.0);
}

TEST(TrainerLogging, EpochMeanAccumulatesInDouble) {
  ScratchDir dir("f64");
  // f32 values whose f32 running sum would lose the small parts.
  auto cm = run_epoch(dir.str(), [](TinyModule& m, const Batch&, int64_t i) {
    double v = i == 0 ? 1e8 : 1.0;
    m.log("big", full({}, v, DType::f32), {.on_step = false, .on_epoch = true, .reduce_fx = "sum"});
  });
  EXPECT_DOUBLE_EQ(cm.at("big"), 1e8 + 2.0);
}

TEST(TrainerLogging, DefaultsForkedNamesAndCsv) {
  ScratchDir dir("csv");
  Trainer* t = nullptr;
  auto cm = run_epoch(
      dir.str(),
      [](TinyModule& m, const Batch&, int64_t i) {
        m.log("a", static_cast<double>(i));                                   // training default: on_step only
        m.log("both", static_cast<double>(i), {.on_step = true, .on_epoch = true});
      },
      &t, 2);
  EXPECT_DOUBLE_EQ(cm.at("both_epoch"), (0 * 4 + 1 * 4 + 2 * 2) / 10.0);
  EXPECT_DOUBLE_EQ(cm.at("both"), cm.at("both_epoch"));  // callbacks see the plain name too
  EXPECT_EQ(cm.count("a"), 0u);                        // step values are not kept after the epoch ends
  Csv c = read_csv(t->logger()->log_dir() + "/metrics.csv");
  std::vector<std::string> want_header = {"a", "both_epoch", "both_step", "epoch", "step"};
  EXPECT_EQ(c.header, want_header);
  // 3 step rows + 1 epoch row per epoch.
  ASSERT_EQ(c.rows.size(), 8u);
  EXPECT_EQ(c.rows[0].at("step"), "0");
  EXPECT_EQ(c.rows[0].at("a"), "0");
  EXPECT_EQ(c.rows[2].at("both_step"), "2");
  EXPECT_EQ(c.rows[3].count("both_step"), 0u);
  EXPECT_EQ(c.rows[3].at("both_epoch"), "0.8");
  EXPECT_EQ(c.rows[3].at("step"), "2");
  EXPECT_EQ(c.rows[7].at("epoch"), "1");
  EXPECT_EQ(c.rows[7].at("step"), "5");
  EXPECT_TRUE(std::filesystem::exists(t->logger()->log_dir() + "/hparams.yaml"));
}

TEST(TrainerLogging, LogEveryNSteps) {
  ScratchDir dir("every");
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) { mm.log("loss", loss); };
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.log_every_n_steps = 2;
  Trainer t(o);
  t.fit(m, make_loader(20, 4));  // 10 steps
  Csv c = read_csv(t.logger()->log_dir() + "/metrics.csv");
  std::vector<std::string> steps;
  for (auto& r : c.rows) steps.push_back(r.at("step"));
  EXPECT_EQ(steps, (std::vector<std::string>{"1", "3", "5", "7", "9"}));
}

TEST(TrainerLogging, ValidationDefaultsToEpochValues) {
  ScratchDir dir("valdefault");
  TinyModule m;
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) { mm.log("vi", static_cast<double>(i)); };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(10, 4));
  EXPECT_DOUBLE_EQ(t.callback_metrics().at("vi"), (0 * 4 + 1 * 4 + 2 * 2) / 10.0);
  Csv c = read_csv(t.logger()->log_dir() + "/metrics.csv");
  ASSERT_EQ(c.rows.size(), 1u);
  EXPECT_EQ(c.rows[0].at("vi"), "0.8");
  EXPECT_EQ(c.rows[0].at("step"), "1");
}

TEST(TrainerLogging, Errors) {
  ScratchDir dir("logerr");
  auto expect_fit_error = [&](std::function<void(TinyModule&)> fn, std::vector<const char*> frags) {
    TinyModule m;
    m.on_train_step = [&](TinyModule& mm, const Batch&, int64_t, const Tensor&) { fn(mm); };
    Trainer t(quiet(dir.str()));
    try {
      t.fit(m, make_loader(4, 4));
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      for (auto f : frags) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
  };
  expect_fit_error([](TinyModule& m) { m.log("x", 1.0, {.on_step = false, .on_epoch = false}); },
                   {"\"x\"", "on_step=false and on_epoch=false"});
  expect_fit_error([](TinyModule& m) { m.log("vec", zeros({3})); }, {"\"vec\"", "scalar", "(3"});
  expect_fit_error([](TinyModule& m) { m.log("r", 1.0, {.reduce_fx = "median"}); }, {"reduce_fx", "median"});
  expect_fit_error(
      [](TinyModule& m) {
        m.log("twice", 1.0);
        m.log("twice", 1.0, {.on_step = false, .on_epoch = true});
      },
      {"twice", "different"});

  // Epoch-level hook with on_step=true, and a hook where logging is not allowed.
  {
    TinyModule m;
    m.on_train_epoch_end_fn = [](TinyModule& mm) { mm.log("e", 1.0, {.on_step = true}); };
    Trainer t(quiet(dir.str()));
    VOLT_EXPECT_ERROR(t.fit(m, make_loader(4, 4)), "on_train_epoch_end", "on_step=true");
  }
  {
    struct FitStartLogger : TinyModule {
      void on_fit_start() override { log("x", 1.0); }
    } m;
    Trainer t(quiet(dir.str()));
    VOLT_EXPECT_ERROR(t.fit(m, make_loader(4, 4)), "\"x\"", "outside");
  }
  TinyModule lone;
  VOLT_EXPECT_ERROR(lone.log("x", 1.0), "\"x\"", "outside");
}

TEST(TrainerLogging, EpochHookLogsAndMetricObjects) {
  ScratchDir dir("metricobj");
  TinyModule m;
  metrics::MeanMetric mean;
  m.on_val_step = [&](TinyModule& mm, const Batch& b, int64_t i, const Tensor&) {
    mean.update(static_cast<double>(i + 1), static_cast<double>(b.size()));
    mm.log("val_mean", mean);
  };
  m.on_train_epoch_end_fn = [](TinyModule& mm) { mm.log("ep", 5.0); };
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(10, 4));
  auto cm = t.callback_metrics();
  EXPECT_NEAR(cm.at("val_mean"), 1.8, 1e-6);  // (f32 result) computed at epoch end, then reset (same value both epochs)
  EXPECT_EQ(mean.update_count(), 0);
  EXPECT_DOUBLE_EQ(cm.at("ep"), 5.0);
  Csv c = read_csv(t.logger()->log_dir() + "/metrics.csv");
  int vm = 0;
  for (auto& r : c.rows)
    if (r.count("val_mean")) {
      ++vm;
      EXPECT_NEAR(std::stod(r.at("val_mean")), 1.8, 1e-6);
    }
  EXPECT_EQ(vm, 2);
}

TEST(TrainerLogging, ProgressBarMetricsAndLoggerOff) {
  ScratchDir dir("pbar");
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
    mm.log("p", static_cast<double>(i), {.on_epoch = true, .prog_bar = true});
    mm.log("hidden", 1.0, {.logger = false});
  };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.logger = false;
  Trainer t(o);
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(t.logger(), nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "lightning_logs"));
  auto pb = t.progress_bar_metrics();
  EXPECT_DOUBLE_EQ(pb.at("p_epoch"), 0.5);
}

TEST(TrainerLogging, CsvLoggerVersionsIncrement) {
  ScratchDir dir("versions");
  CSVLogger a(dir.str());
  EXPECT_EQ(a.version(), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "lightning_logs")) << "resolving a version writes nothing";
  a.save();  // creates version_0
  CSVLogger b(dir.str());
  EXPECT_EQ(b.version(), 1);
  b.log_metrics({{"x", 1.5}}, 3);
  b.log_metrics({{"y", 2}}, 4);
  b.save();
  Csv c = read_csv(b.log_dir() + "/metrics.csv");
  EXPECT_EQ(c.header, (std::vector<std::string>{"step", "x", "y"}));
  EXPECT_EQ(c.rows[0].at("x"), "1.5");
  EXPECT_EQ(c.rows[1].count("x"), 0u);
  EXPECT_EQ(c.rows[1].at("step"), "4");
}

TEST(TrainerConsole, ProgressSummaryAndTestTable) {
  ScratchDir dir("console");
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) {
    mm.log("train_loss", loss, {.prog_bar = true});
  };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.enable_progress_bar = true;
  o.enable_model_summary = true;
  Trainer t(o);
  ::testing::internal::CaptureStdout();
  t.fit(m, make_loader(8, 4));
  auto res = t.test(m, make_loader(8, 4));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Epoch 0:"), std::string::npos) << out;
  EXPECT_NE(out.find("train_loss"), std::string::npos) << out;
  EXPECT_NE(out.find("test_loss"), std::string::npos) << out;
  EXPECT_NE(out.find("Test metric"), std::string::npos) << out;
}

TEST(TrainerLogging, ValidationOnStepRowsAndLogDict) {
  ScratchDir dir("valstep");
  TinyModule m;
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
    mm.log("vs", static_cast<double>(i), {.on_step = true, .on_epoch = false});
    mm.log_dict(std::map<std::string, double>{{"d1", 1.0}, {"d2", 2.0}});
  };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  t.fit(m, make_loader(4, 4), make_loader(8, 4));
  Csv c = read_csv(t.logger()->log_dir() + "/metrics.csv");
  std::vector<std::string> vs;
  for (auto& r : c.rows)
    if (r.count("vs")) vs.push_back(r.at("vs"));
  EXPECT_EQ(vs, (std::vector<std::string>{"0", "1"}));  // one row per validation batch
  auto cm = t.callback_metrics();
  EXPECT_DOUBLE_EQ(cm.at("d1"), 1.0);
  EXPECT_DOUBLE_EQ(cm.at("d2"), 2.0);
}

TEST(TrainerLogging, LimitValBatchesZeroDisablesValidation) {
  ScratchDir dir("noval");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.limit_val_batches = 0;
  o.num_sanity_val_steps = 2;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(8, 4));
  EXPECT_EQ(m.val_steps, 0);
  EXPECT_EQ(t.validation_runs(), 0);
}
