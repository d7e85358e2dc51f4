// Loop behaviour: hook order, step counts, accumulation, limits, validation frequency, clipping, schedulers.
#include <cmath>

#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

TEST(TrainerLoop, HookOrderForOneEpoch) {
  ScratchDir dir("hooks");
  TinyModule m;
  m.record = true;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.num_sanity_val_steps = 1;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(4, 4));
  std::vector<std::string> batch = {"on_train_batch_start",     "training_step",       "on_before_backward",
                                    "on_after_backward",        "on_before_optimizer_step",
                                    "on_before_zero_grad",      "on_train_batch_end"};
  std::vector<std::string> val = {"on_validation_epoch_start", "validation_step", "on_validation_epoch_end"};
  std::vector<std::string> want = {"configure_optimizers", "on_fit_start"};
  want.insert(want.end(), val.begin(), val.end());  // sanity check
  want.push_back("on_train_epoch_start");
  want.insert(want.end(), batch.begin(), batch.end());
  want.insert(want.end(), batch.begin(), batch.end());
  want.insert(want.end(), val.begin(), val.end());
  want.push_back("on_train_epoch_end");
  want.push_back("on_fit_end");
  EXPECT_EQ(m.calls, want);
  EXPECT_EQ(t.global_step(), 2);
  EXPECT_EQ(t.current_epoch(), 1);
}

TEST(TrainerLoop, AccumulateGradBatchesMatchesManualSgd) {
  ScratchDir dir("accum");
  // 5 batches of 2, accumulate 2: steps after batches 2, 4 and 5 (epoch end).
  auto ds = make_dataset(10);
  TinyModule m;
  m.lr = 0.05;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.accumulate_grad_batches = 2;
  Trainer t(o);
  t.fit(m, std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2}));
  EXPECT_EQ(t.global_step(), 3);

  // Manual: grads of loss/2 summed over each window, plain SGD.
  TinyModule ref;
  std::vector<std::vector<int64_t>> windows = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}};
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    auto& idx = windows[wi];
    for (size_t k = 0; k < idx.size(); k += 2) {
      Batch b = ds->get_batch({idx[k], idx[k + 1]});
      Tensor loss = mse_loss(ref.predict(b.input), b.target) / 2.0;
      loss.backward();
    }
    NoGradGuard ng;
    for (Tensor p : ref.parameters()) {
      Tensor upd = p - p.grad() * 0.05;
      p.copy_(upd);
      p.set_grad(Tensor());
    }
  }
  auto a = values(m.w), b = values(ref.w);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  EXPECT_NEAR(values(m.b)[0], values(ref.b)[0], 1e-6);
}

TEST(TrainerLoop, MaxStepsStopsMidEpoch) {
  ScratchDir dir("maxsteps");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_steps = 5;
  Trainer t(o);
  t.fit(m, make_loader(12, 4));  // 3 batches per epoch
  EXPECT_EQ(t.global_step(), 5);
  EXPECT_EQ(m.train_steps, 5);
  EXPECT_EQ(t.current_epoch(), 2);  // epoch 0 complete, epoch 1 stopped after 2 batches, counter advanced
}

TEST(TrainerLoop, LimitTrainBatchesCountAndFraction) {
  ScratchDir dir("limits");
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 2;
    o.limit_train_batches = 2;
    o.limit_val_batches = 1;
    Trainer t(o);
    t.fit(m, make_loader(40, 4), make_loader(16, 4));
    EXPECT_EQ(m.train_steps, 4);
    EXPECT_EQ(m.val_steps, 2);
    EXPECT_EQ(t.global_step(), 4);
  }
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 1;
    o.limit_train_batches = 0.25;  // 10 batches -> 2
    o.limit_val_batches = 0.5;     // 4 batches -> 2
    Trainer t(o);
    t.fit(m, make_loader(40, 4), make_loader(16, 4));
    EXPECT_EQ(m.train_steps, 2);
    EXPECT_EQ(m.val_steps, 2);
  }
  VOLT_EXPECT_ERROR(TrainerOptions{.limit_train_batches = 1.5}.limit_train_batches.resolve(10, "limit_train_batches"),
                    "limit_train_batches", "1.5");
}

TEST(TrainerLoop, DefaultMaxEpochsIs1000AndMinEpochsBeatsStop) {
  EXPECT_EQ(TrainerOptions{}.max_epochs, -1);
  ScratchDir dir("minepochs");
  TinyModule m;
  Trainer* tp = nullptr;
  m.on_train_step = [&](TinyModule&, const Batch&, int64_t, const Tensor&) { tp->request_stop(); };
  auto o = quiet(dir.str());
  o.min_epochs = 3;
  Trainer t(o);
  tp = &t;
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(t.current_epoch(), 3);  // stop requested every batch, honoured once min_epochs is reached
  EXPECT_EQ(t.global_step(), 6);
}

TEST(TrainerLoop, MinStepsBeatsStop) {
  ScratchDir dir("minsteps");
  TinyModule m;
  Trainer* tp = nullptr;
  m.on_train_step = [&](TinyModule&, const Batch&, int64_t, const Tensor&) { tp->request_stop(); };
  auto o = quiet(dir.str());
  o.min_steps = 5;
  Trainer t(o);
  tp = &t;
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(t.global_step(), 5);
}

TEST(TrainerLoop, ValCheckIntervalAndEveryNEpochs) {
  ScratchDir dir("valcheck");
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 2;
    o.val_check_interval = 0.5;  // 4 batches -> after batches 2 and 4
    Trainer t(o);
    t.fit(m, make_loader(16, 4), make_loader(4, 2));
    EXPECT_EQ(t.validation_runs(), 4);
    EXPECT_EQ(m.val_steps, 8);
  }
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 1;
    o.val_check_interval = 3;  // 6 batches -> after 3 and 6
    Trainer t(o);
    t.fit(m, make_loader(24, 4), make_loader(4, 4));
    EXPECT_EQ(t.validation_runs(), 2);
  }
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 1;
    o.val_check_interval = 7;  // longer than the 6-batch epoch: would never validate
    Trainer t(o);
    try {
      t.fit(m, make_loader(24, 4), make_loader(4, 4));
      ADD_FAILURE() << "expected an error for val_check_interval > batches per epoch";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("val_check_interval=7"), std::string::npos) << e.what();
    }
  }
  {
    TinyModule m;
    auto o = quiet(dir.str());
    o.max_epochs = 5;
    o.check_val_every_n_epoch = 2;  // epochs 1 and 3
    Trainer t(o);
    t.fit(m, make_loader(8, 4), make_loader(4, 4));
    EXPECT_EQ(t.validation_runs(), 2);
  }
}

TEST(TrainerLoop, SanityStepsRunButAreNotLoggedOrCounted) {
  ScratchDir dir("sanity");
  TinyModule m;
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) { mm.log("val_loss", loss); };
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.num_sanity_val_steps = 2;
  o.limit_train_batches = 1;
  Trainer t(o);
  t.fit(m, make_loader(8, 4), make_loader(12, 4));
  EXPECT_EQ(m.val_steps, 2 + 3);
  EXPECT_EQ(t.validation_runs(), 1);
  Csv c = read_csv(t.logger()->log_dir() + "/metrics.csv");
  int val_rows = 0;
  for (auto& r : c.rows) val_rows += r.count("val_loss");
  EXPECT_EQ(val_rows, 1);
}

TEST(TrainerLoop, GradientClipByValueBoundsTheUpdate) {
  ScratchDir dir("clip");
  TinyModule m;
  m.lr = 1.0;
  m.on_train_step = [](TinyModule&, const Batch&, int64_t, const Tensor&) {};
  auto o = quiet(dir.str());
  o.max_steps = 1;
  o.gradient_clip_val = 0.01;
  o.gradient_clip_algorithm = GradClipAlgorithm::value;
  Trainer t(o);
  t.fit(m, make_loader(4, 4));
  for (float v : values(m.w)) EXPECT_LE(std::fabs(v), 0.01f + 1e-7f);
  EXPECT_NEAR(std::fabs(values(m.b)[0]), 0.01f, 1e-7f);  // |grad b| is far above 0.01
}

TEST(TrainerLoop, GradientClipByNorm) {
  ScratchDir dir("clipnorm");
  TinyModule m;
  m.lr = 1.0;
  auto o = quiet(dir.str());
  o.max_steps = 1;
  o.gradient_clip_val = 0.5;
  Trainer t(o);
  t.fit(m, make_loader(4, 4));
  double sq = 0;
  for (float v : values(m.w)) sq += v * v;
  sq += values(m.b)[0] * values(m.b)[0];
  EXPECT_NEAR(std::sqrt(sq), 0.5, 1e-5);  // update = -lr * clipped grad, starting from zero
}

TEST(TrainerLoop, StepAndEpochSchedulers) {
  ScratchDir dir("sched");
  for (SchedulerInterval interval : {SchedulerInterval::step, SchedulerInterval::epoch}) {
    TinyModule m;
    std::shared_ptr<optim::SGD> opt;
    m.make_optimizers = [&](TinyModule& mm) {
      opt = std::make_shared<optim::SGD>(mm.parameters(), optim::SGDOptions{.lr = 1.0});
      auto s = std::make_shared<optim::StepLR>(*opt, 1, 0.5);
      return Optimizers(opt, SchedulerConfig{s, interval, 1});
    };
    auto o = quiet(dir.str());
    o.max_epochs = 2;
    Trainer t(o);
    t.fit(m, make_loader(12, 4));  // 3 steps per epoch
    double expect = interval == SchedulerInterval::step ? std::pow(0.5, 6) : std::pow(0.5, 2);
    EXPECT_DOUBLE_EQ(opt->param_groups()[0].lr, expect) << name(interval);
  }
}

TEST(TrainerLoop, SkippedStepWhenLossUndefined) {
  ScratchDir dir("skip");
  struct Skipper : TinyModule {
    Tensor training_step(const Batch& b, int64_t idx) override {
      if (idx % 2 == 1) return Tensor();
      return TinyModule::training_step(b, idx);
    }
  } m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  t.fit(m, make_loader(16, 4));
  EXPECT_EQ(t.global_step(), 2);
}

TEST(TrainerLoop, ValidateTestPredictEntryPoints) {
  ScratchDir dir("eval");
  TinyModule m;
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) { mm.log("val_loss", loss); };
  auto o = quiet(dir.str());
  Trainer t(o);
  auto res = t.test(m, make_loader(10, 4));
  ASSERT_EQ(res.size(), 1u);
  // w = b = 0: test_loss = mean(y^2) weighted by batch sizes = mean over all samples.
  auto ds = make_dataset(10);
  double want = ds->targets().pow(2.0).mean().item();
  EXPECT_NEAR(res[0].at("test_loss"), want, 1e-6);
  auto v = t.validate(m, make_loader(10, 4));
  EXPECT_NEAR(v[0].at("val_loss"), want, 1e-6);
  auto preds = t.predict(m, make_loader(10, 4));
  ASSERT_EQ(preds.size(), 3u);
  EXPECT_EQ(preds[2].size(0), 2);
}

TEST(TrainerOptionsParse, MaxTime) {
  EXPECT_DOUBLE_EQ(parse_max_time("00:12:00:00"), 12 * 3600.0);
  EXPECT_DOUBLE_EQ(parse_max_time("01:00:00:05"), 86405.0);
  EXPECT_DOUBLE_EQ(parse_max_time("90"), 90.0);
  EXPECT_LT(parse_max_time(""), 0);
  VOLT_EXPECT_ERROR(parse_max_time("1:2:3"), "max_time", "DD:HH:MM:SS");
  VOLT_EXPECT_ERROR(parse_max_time("abc"), "max_time");
}

TEST(TrainerOptionsParse, MaxTimeZeroStopsImmediately) {
  ScratchDir dir("maxtime");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_time = "0";
  Trainer t(o);
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(t.global_step(), 0);
}

TEST(TrainerOptionsParse, BadOptionsAreErrors) {
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.accelerator = "cpu", .precision = "8-bit"}), "precision", "8-bit");
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.accelerator = "cpu", .strategy = "horovod"}), "strategy", "horovod");
  VOLT_EXPECT_ERROR(Trainer(TrainerOptions{.accelerator = "cpu", .accumulate_grad_batches = 0}),
                    "accumulate_grad_batches");
}

TEST(TrainerLoop, BatchStartFalseSkipsAndNoValidationStepMeansNoValidation) {
  ScratchDir dir("skipstart");
  struct M : TinyModule {
    bool on_train_batch_start(const Batch&, int64_t idx) override { return idx != 1; }
  } m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  t.fit(m, make_loader(12, 4));
  EXPECT_EQ(m.train_steps, 2);
  EXPECT_EQ(t.global_step(), 2);

  struct NoVal : TrainModule {
    Tensor w = register_parameter("w", zeros({1}));
    Tensor training_step(const Batch& b, int64_t) override { return (b.input.sum({1}) * w).pow(2.0).mean(); }
    Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.1}); }
  } nv;
  auto o2 = quiet(dir.str());
  o2.max_epochs = 2;
  o2.num_sanity_val_steps = 2;
  Trainer t2(o2);
  t2.fit(nv, make_loader(8, 4), make_loader(8, 4));
  EXPECT_EQ(t2.validation_runs(), 0);
  EXPECT_FALSE(t2.has_validation());
  EXPECT_EQ(t2.global_step(), 4);
}

TEST(TrainerLoop, ToggleOptimizerFreezesOtherParameters) {
  TinyModule m;
  optim::SGD only_w(std::vector<Tensor>{m.w}, {.lr = 0.1});
  m.toggle_optimizer(only_w);
  EXPECT_TRUE(m.w.requires_grad());
  EXPECT_FALSE(m.b.requires_grad());
  m.untoggle_optimizer();
  EXPECT_TRUE(m.b.requires_grad());
}

TEST(TrainerLoop, AllGatherWithOneProcessIsIdentityAndContextAccessors) {
  ScratchDir dir("gather");
  TinyModule m;
  Tensor gathered;
  int64_t rank = -1, world = -1, epoch_seen = -1;
  Device dev = cuda_device(0);
  m.on_train_step = [&](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) {
    gathered = mm.all_gather(loss.detach());
    rank = mm.global_rank();
    world = mm.world_size();
    epoch_seen = mm.current_epoch();
    dev = mm.device();
    EXPECT_TRUE(mm.is_global_zero());
    EXPECT_EQ(mm.trainer()->training(), true);
  };
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  Trainer t(o);
  t.fit(m, make_loader(4, 4));
  EXPECT_EQ(gathered.dim(), 0);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(world, 1);
  EXPECT_EQ(epoch_seen, 1);
  EXPECT_TRUE(dev.is_cpu());
}

// The Trainer's automatic norm clipping (the sync-free clip_grad_norm_no_sync_) gives the same training as
// clipping by hand with nn::clip_grad_norm_ after each backward.
TEST(TrainerLoop, GradientClipByNormMatchesManualClipping) {
  ScratchDir dir("clipnorm_manual");
  auto ds = make_dataset(12);
  TinyModule m;
  m.lr = 0.3;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.gradient_clip_val = 0.4;
  Trainer t(o);
  t.fit(m, std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 3}));
  EXPECT_EQ(t.global_step(), 8);

  TinyModule ref;
  int clipped = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int64_t s = 0; s < 12; s += 3) {
      Batch b = ds->get_batch({s, s + 1, s + 2});
      Tensor loss = mse_loss(ref.predict(b.input), b.target);
      loss.backward();
      NoGradGuard ng;
      double total = nn::clip_grad_norm_(ref.parameters(), 0.4);
      clipped += total > 0.4;
      for (Tensor q : ref.parameters()) {
        Tensor upd = q - q.grad() * 0.3;
        q.copy_(upd);
        q.set_grad(Tensor());
      }
    }
  }
  EXPECT_GT(clipped, 0);  // the clipping branch is exercised
  auto a = values(m.w), b = values(ref.w);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  EXPECT_NEAR(values(m.b)[0], values(ref.b)[0], 1e-6);
}

namespace {
// Records every batch the loader assembles (by its first sample index).
struct CountingDataset : data::Dataset {
  std::shared_ptr<data::TensorDataset> inner;
  mutable std::vector<int64_t> fetched;
  explicit CountingDataset(int64_t n) : inner(make_dataset(n)) {}
  int64_t size() const override { return inner->size(); }
  Batch get(int64_t i) const override { return inner->get(i); }
  Batch get_batch(const std::vector<int64_t>& idx) const override {
    fetched.push_back(idx.front());
    return inner->get_batch(idx);
  }
};
}  // namespace

// The training loop keeps one batch in flight: batch k + 1 is taken from the loader before step k runs, but
// never beyond limit_train_batches, and evaluation never beyond limit_val_batches.
TEST(TrainerLoop, PrefetchesOneBatchWithinTheLimits) {
  ScratchDir dir("prefetch");
  auto train_ds = std::make_shared<CountingDataset>(10);  // 5 batches of 2
  auto val_ds = std::make_shared<CountingDataset>(8);     // 4 batches of 2
  TinyModule m;
  std::vector<size_t> fetched_at_step;
  m.on_train_step = [&](TinyModule&, const Batch&, int64_t, const Tensor&) {
    fetched_at_step.push_back(train_ds->fetched.size());
  };
  m.on_val_step = [](TinyModule&, const Batch&, int64_t, const Tensor&) {};
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.limit_train_batches = 3;
  o.limit_val_batches = 2;
  Trainer t(o);
  t.fit(m, std::make_shared<data::DataLoader>(train_ds, data::DataLoaderOptions{.batch_size = 2}),
        std::make_shared<data::DataLoader>(val_ds, data::DataLoaderOptions{.batch_size = 2}));
  EXPECT_EQ(t.global_step(), 6);
  EXPECT_EQ(train_ds->fetched, (std::vector<int64_t>{0, 2, 4, 0, 2, 4}));  // 3 per epoch, in order
  EXPECT_EQ(fetched_at_step, (std::vector<size_t>{2, 3, 3, 5, 6, 6}));     // the next one already taken
  EXPECT_EQ(val_ds->fetched, (std::vector<int64_t>{0, 2, 0, 2}));          // 2 per validation run
}
