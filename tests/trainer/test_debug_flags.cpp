// Upstream's debugging and data flags: fast_dev_run, overfit_batches, reload_dataloaders_every_n_epochs,
// estimated_stepping_batches; evaluation samplers' epochs; the logger version on the progress bar.
#include <gtest/gtest.h>

#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/progress_bar.h>
#include <volt/runtime/cuda_api.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

namespace {

// Counts the loaders it hands out and gives each a shuffled training loader with its own seed.
struct CountingDataModule : data::DataModule {
  int train_calls = 0, val_calls = 0;
  std::shared_ptr<data::DataLoader> train_dataloader() override {
    ++train_calls;
    return make_loader(40, 8, /*shuffle=*/false);
  }
  std::shared_ptr<data::DataLoader> val_dataloader() override {
    ++val_calls;
    return make_loader(16, 8);
  }
};

// The first input value of every batch the module trains on, per epoch.
struct BatchRecorder : TinyModule {
  std::vector<std::vector<float>> firsts;  // per epoch
  int64_t estimated = -1;
  BatchRecorder() {
    on_train_step = [this](TinyModule&, const Batch& b, int64_t idx, const Tensor&) {
      if (idx == 0) firsts.emplace_back();
      firsts.back().push_back(b.input.to_vector<float>()[0]);
    };
  }
};

}  // namespace

TEST(FastDevRun, RunsNBatchesOfEveryLoopAndWritesNothing) {
  ScratchDir dir("fast_dev_run");
  TinyModule m;
  m.record = true;
  auto o = quiet(dir.str());
  o.fast_dev_run = 2;
  o.max_epochs = 5;
  o.num_sanity_val_steps = 2;
  o.enable_checkpointing = true;
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir.str() + "/ckpts"}),
                 std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "nothing_logged"})};
  ::testing::internal::CaptureStdout();
  Trainer t(o);
  t.fit(m, make_loader(80, 8), make_loader(40, 8));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("fast_dev_run=2"), std::string::npos) << out;
  EXPECT_EQ(t.global_step(), 2);
  EXPECT_EQ(m.train_steps, 2);
  EXPECT_EQ(m.val_steps, 2);  // no sanity check: the epoch-end validation's 2 batches
  EXPECT_EQ(t.current_epoch(), 1);
  EXPECT_TRUE(t.loggers().empty());
  EXPECT_FALSE(fs::exists(dir.str() + "/ckpts")) << "fast_dev_run wrote a checkpoint";
  EXPECT_FALSE(fs::exists(dir.str() + "/lightning_logs")) << "fast_dev_run wrote logs";
  t.test(m, make_loader(80, 8));
  const auto preds = t.predict(m, make_loader(80, 8));
  EXPECT_EQ(preds.size(), 2u);
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.fast_dev_run = -1}), "fast_dev_run=-1", ">= 0");
}

TEST(OverfitBatches, TrainsAndValidatesOnTheSameFirstBatchesWithoutShuffling) {
  ScratchDir dir("overfit");
  manual_seed(1);
  BatchRecorder m;
  auto o = quiet(dir.str());
  o.overfit_batches = 3;  // batches
  o.max_epochs = 3;
  ::testing::internal::CaptureStderr();
  Trainer t(o);
  t.fit(m, make_loader(80, 8, /*shuffle=*/true), make_loader(40, 8));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("shuffling is turned off"), std::string::npos) << err;
  ASSERT_EQ(m.firsts.size(), 3u);
  for (const auto& epoch : m.firsts) EXPECT_EQ(epoch, m.firsts[0]) << "every epoch must see the same batches";
  EXPECT_EQ(m.firsts[0].size(), 3u);
  // The loader's own order (no shuffle): the first samples of batches 0, 1, 2.
  auto plain = make_loader(80, 8);
  EXPECT_FLOAT_EQ(m.firsts[0][0], plain->next()->input.to_vector<float>()[0]);
  EXPECT_EQ(t.global_step(), 9);
  EXPECT_EQ(m.val_steps, 3 * 3);  // limit_val_batches follows: 3 batches per epoch (quiet(): no sanity check)

  // A fraction: a quarter of 10 batches.
  BatchRecorder f;
  auto of = quiet(dir.str());
  of.overfit_batches = 0.25;
  of.max_epochs = 1;
  Trainer tf(of);
  tf.fit(f, make_loader(80, 8));
  EXPECT_EQ(tf.global_step(), 2);
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.overfit_batches = 1.5}), "overfit_batches", "fraction in [0, 1]");
}

TEST(ReloadDataloaders, AsksTheDataModuleAgainEveryNEpochs) {
  ScratchDir dir("reload");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 5;
  o.reload_dataloaders_every_n_epochs = 2;
  Trainer t(o);
  CountingDataModule dm;
  t.fit(m, dm);
  // Epoch 0 uses the loaders fit started with; epochs 2 and 4 get new ones.
  EXPECT_EQ(dm.train_calls, 3);
  EXPECT_EQ(dm.val_calls, 3);
  EXPECT_EQ(t.global_step(), 25);
  // Off by default.
  TinyModule m2;
  auto o2 = quiet(dir.str());
  o2.max_epochs = 3;
  Trainer t2(o2);
  CountingDataModule dm2;
  t2.fit(m2, dm2);
  EXPECT_EQ(dm2.train_calls, 1);
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.reload_dataloaders_every_n_epochs = -1}),
                    "reload_dataloaders_every_n_epochs=-1");
}

TEST(EstimatedSteppingBatches, CountsTheOptimizerStepsOfTheRun) {
  ScratchDir dir("estimated");
  struct Case {
    int64_t max_epochs, max_steps, accumulate;
    BatchAmount limit;
    int64_t expected;
  };
  // 80 samples at batch 8 = 10 batches per epoch.
  const std::vector<Case> cases = {
      {3, -1, 1, 1.0, 30},      // epochs x batches
      {3, -1, 3, 1.0, 12},      // ceil(10 / 3) = 4 steps per epoch
      {3, 7, 1, 1.0, 7},        // max_steps caps
      {-1, 25, 1, 1.0, 25},     // only max_steps
      {2, -1, 1, 0.5, 10},      // limit_train_batches
      {2, -1, 2, int64_t{3}, 4},  // 3 batches, accumulate 2: 2 steps per epoch
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.max_epochs) + " epochs, max_steps " + std::to_string(c.max_steps) + ", acc " +
                 std::to_string(c.accumulate));
    TinyModule m;
    int64_t seen = -1;
    Trainer* trainer = nullptr;
    m.make_optimizers = [&](TinyModule& mm) -> Optimizers {
      seen = trainer->estimated_stepping_batches();
      return optim::SGD(mm.parameters(), {.lr = 0.01});
    };
    auto o = quiet(dir.str());
    o.max_epochs = c.max_epochs;
    o.max_steps = c.max_steps;
    o.accumulate_grad_batches = c.accumulate;
    o.limit_train_batches = c.limit;
    Trainer t(o);
    trainer = &t;
    t.fit(m, make_loader(80, 8));
    EXPECT_EQ(seen, c.expected);
    EXPECT_EQ(t.global_step(), c.expected) << "the estimate is the number of steps the run took";
  }
  Trainer idle(quiet(dir.str()));
  VOLT_EXPECT_ERROR(idle.estimated_stepping_batches(), "estimated_stepping_batches", "during fit");
}

TEST(EvaluationLoaders, SamplerEpochIsTheTrainersEpoch) {
  // A shuffling validation loader: the sanity check and epoch 0's validation see the same order (both at epoch
  // 0), epoch 1's validation another one.
  ScratchDir dir("eval_epoch");
  TinyModule m;
  std::vector<std::vector<float>> orders;  // first input value of each batch, per validation run
  m.on_val_step = [&](TinyModule&, const Batch& b, int64_t idx, const Tensor&) {
    if (idx == 0) orders.emplace_back();
    orders.back().push_back(b.input.to_vector<float>()[0]);
  };
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.num_sanity_val_steps = -1;
  Trainer t(o);
  t.fit(m, make_loader(32, 8), make_loader(64, 8, /*shuffle=*/true, /*seed=*/3));
  ASSERT_EQ(orders.size(), 3u);  // sanity, epoch 0, epoch 1
  EXPECT_EQ(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(ProgressBar, ShowsTheLoggerVersionFirst) {
  const std::string line = ProgressBar::format_line("Epoch 0", 5, 10, 1.0, {{"loss", 0.5}, {"v_num", 3}}, 10);
  EXPECT_NE(line.find("it/s, v_num=3, loss=0.500]"), std::string::npos) << line;
  // Through the Trainer: the CSV logger's version on the bar.
  ScratchDir dir("v_num");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.enable_progress_bar = true;
  Trainer t(o);
  ::testing::internal::CaptureStdout();
  t.fit(m, make_loader(16, 8));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("v_num=0"), std::string::npos) << out;
}

TEST(Trainer, WarnsWhenNeitherMaxEpochsNorMaxStepsIsSet) {
  ::testing::internal::CaptureStderr();
  { Trainer t(TrainerOptions{.accelerator = "cpu", .enable_progress_bar = false}); }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("1000 epochs"), std::string::npos) << err;
  ::testing::internal::CaptureStderr();
  { Trainer t(TrainerOptions{.accelerator = "cpu", .max_steps = 10}); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("1000 epochs"), std::string::npos);
}

TEST(Conventions, TestAfterFitLogsAtTheStepCount) {
  // As upstream: rows during fit carry the latest step's index, a test run after fit the number of steps.
  ScratchDir dir("test_row_step");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_steps = 7;
  Trainer t(o);
  t.fit(m, make_loader(80, 8), make_loader(16, 8));
  ::testing::internal::CaptureStdout();
  t.test(m, make_loader(16, 8));
  ::testing::internal::GetCapturedStdout();
  const Csv c = read_csv(t.log_dir() + "/metrics.csv");
  std::string test_step;
  for (const auto& r : c.rows)
    if (r.count("test_loss") && !r.at("test_loss").empty()) test_step = r.at("step");
  EXPECT_EQ(test_step, "7");
}

TEST(Conventions, ReduceFxNamesAsUpstreamAcceptsThem) {
  EXPECT_EQ(parse_reduce_fx("avg"), ReduceFx::Mean);
  EXPECT_EQ(parse_reduce_fx("MEAN"), ReduceFx::Mean);
  EXPECT_EQ(parse_reduce_fx("Max"), ReduceFx::Max);
  EXPECT_EQ(parse_reduce_fx("sum"), ReduceFx::Sum);
  VOLT_EXPECT_ERROR(parse_reduce_fx("median"), "reduce_fx=\"median\"", "\"avg\"", "metrics::Metric");
}

TEST(Conventions, LoggingAnIntegerTensorWarnsOnceAndConverts) {
  ScratchDir dir("log_int");
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch& b, int64_t, const Tensor&) {
    mm.log("count", full({}, static_cast<double>(b.size()), DType::i64), {.on_step = false, .on_epoch = true});
  };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  ::testing::internal::CaptureStderr();
  t.fit(m, make_loader(40, 8));
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string warning = "log(\"count\") in training_step: the value is an integer tensor";
  ASSERT_NE(err.find(warning), std::string::npos) << err;
  EXPECT_EQ(err.find(warning), err.rfind(warning)) << "warned more than once:\n" << err;
  EXPECT_DOUBLE_EQ(t.callback_metrics().at("count"), 8.0);
}

TEST(Conventions, StartUpLineSaysWhichAcceleratorIsUsed) {
  ::testing::internal::CaptureStdout();
  { Trainer t(TrainerOptions{.accelerator = "cpu", .max_steps = 1}); }
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string want = std::string("GPU available: ") + (cuda_available() && cuda_device_count() > 0 ? "True (cuda)" : "False") +
                           ", used: False\n";
  EXPECT_NE(out.find(want), std::string::npos) << out;
}

TEST(ManualOptimisation, StepRowsAreLoggedEveryNSteps) {
  // A module stepping two optimizers per batch (global_step += 2): rows whenever a multiple of
  // log_every_n_steps is reached or passed.
  struct TwoSteps : TinyModule {
    TwoSteps() { automatic_optimization = false; }
    Tensor training_step(const Batch& b, int64_t) override {
      Tensor loss = mse_loss(predict(b.input), b.target);
      log("loss", loss);
      manual_backward(loss);
      for (auto& opt : optimizers()) {
        opt.step();
        opt.zero_grad();
      }
      return loss;
    }
    Optimizers configure_optimizers() override {
      Optimizers o;
      o.optimizers.push_back(std::make_shared<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions{.lr = 0.01}));
      o.optimizers.push_back(std::make_shared<optim::SGD>(std::vector<Tensor>{b}, optim::SGDOptions{.lr = 0.01}));
      return o;
    }
  } m;
  ScratchDir dir("manual_rows");
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.log_every_n_steps = 3;
  Trainer t(o);
  t.fit(m, make_loader(48, 8));  // 6 batches, 12 steps: multiples of 3 reached after batches 2, 3, 5 and 6
  EXPECT_EQ(t.global_step(), 12);
  const Csv c = read_csv(t.log_dir() + "/metrics.csv");
  std::vector<std::string> steps;
  for (const auto& r : c.rows)
    if (r.count("loss") && !r.at("loss").empty()) steps.push_back(r.at("step"));
  EXPECT_EQ(steps, (std::vector<std::string>{"3", "5", "9", "11"}));
}
