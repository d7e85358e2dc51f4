// Non-finite values in training: Trainer(on_nonfinite_loss = skip | stop) and Trainer(detect_anomaly).
#include <cmath>
#include <limits>

#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// TinyModule whose loss is NaN at the listed batch indices of every epoch (still attached to the graph, so
// backpropagating it would poison the parameters), or skipped (undefined loss) when `skip_instead` is set.
struct NanAt : TinyModule {
  std::set<int64_t> bad;
  bool skip_instead = false;
  Tensor training_step(const Batch& batch, int64_t idx) override {
    Tensor loss = TinyModule::training_step(batch, idx);
    if (!bad.count(idx)) return loss;
    if (skip_instead) return Tensor();
    return loss * std::numeric_limits<double>::quiet_NaN();
  }
};

std::vector<float> params_of(TinyModule& m) {
  std::vector<float> v = values(m.w);
  v.push_back(values(m.b)[0]);
  return v;
}

}  // namespace

TEST(NonFiniteLoss, IgnoreLetsTheNaNReachTheParameters) {
  ScratchDir dir("nan_ignore");
  NanAt m;
  m.bad = {1};
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  t.fit(m, make_loader(8, 2));
  EXPECT_TRUE(std::isnan(params_of(m)[0]));
  EXPECT_EQ(t.nonfinite_losses(), 0);  // not even checked
}

TEST(NonFiniteLoss, SkipDropsExactlyThatStep) {
  ScratchDir dir("nan_skip");
  NanAt skipped, reference;
  skipped.bad = reference.bad = {1, 2};
  reference.skip_instead = true;  // the same batches left out by returning no loss
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  Trainer ref(o);
  ref.fit(reference, make_loader(8, 2));
  o.on_nonfinite_loss = NonFiniteLoss::skip;
  Trainer t(o);
  t.fit(skipped, make_loader(8, 2));
  EXPECT_EQ(t.nonfinite_losses(), 4);  // two per epoch
  EXPECT_EQ(t.global_step(), ref.global_step());
  EXPECT_EQ(t.global_step(), 4);
  EXPECT_EQ(params_of(skipped), params_of(reference));
  for (float v : params_of(skipped)) EXPECT_TRUE(std::isfinite(v));
}

TEST(NonFiniteLoss, SkipDiscardsThePartialAccumulationWindow) {
  ScratchDir dir("nan_accum");
  // 4 batches, accumulate 2: batch 1 is NaN, so window {0, 1} is dropped whole; window {2, 3} steps.
  NanAt skipped;
  skipped.bad = {1};
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.accumulate_grad_batches = 2;
  o.on_nonfinite_loss = NonFiniteLoss::skip;
  Trainer t(o);
  t.fit(skipped, make_loader(8, 2));
  EXPECT_EQ(t.global_step(), 1);
  // Reference: one SGD step on batches 2 and 3 only (the mean of their two losses).
  NanAt ref;
  auto ds = make_dataset(8);
  Tensor x = ds->get(4).input, y;
  {
    std::vector<Tensor> xs, ys;
    for (int64_t i = 4; i < 8; ++i) {
      xs.push_back(ds->get(i).input.unsqueeze(0));
      ys.push_back(ds->get(i).target.reshape({1}));
    }
    x = cat(xs, 0);
    y = cat(ys, 0);
  }
  Tensor loss = (mse_loss(ref.predict(x.narrow(0, 0, 2)), y.narrow(0, 0, 2)) +
                 mse_loss(ref.predict(x.narrow(0, 2, 2)), y.narrow(0, 2, 2))) / 2.0;
  loss.backward();
  {
    NoGradGuard ng;
    ref.w.copy_(ref.w - ref.w.grad() * ref.lr);
    ref.b.copy_(ref.b - ref.b.grad() * ref.lr);
  }
  std::vector<float> got = params_of(skipped), want = params_of(ref);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(NonFiniteLoss, StopEndsFitAfterTheFirstEvenBeforeMinEpochs) {
  ScratchDir dir("nan_stop");
  NanAt m;
  m.bad = {2};
  auto o = quiet(dir.str());
  o.max_epochs = 5;
  o.min_epochs = 3;
  o.on_nonfinite_loss = NonFiniteLoss::stop;
  Trainer t(o);
  t.fit(m, make_loader(8, 2));
  EXPECT_EQ(t.nonfinite_losses(), 1);
  EXPECT_EQ(t.global_step(), 2);  // batches 0 and 1 stepped, batch 2 skipped, then stop
  EXPECT_EQ(m.train_steps, 3);
  for (float v : params_of(m)) EXPECT_TRUE(std::isfinite(v));
}

static TrainerOptions o2(const std::string& dir) {
  TrainerOptions o = quiet(dir);
  o.max_epochs = 1;
  return o;
}

TEST(DetectAnomaly, TrainerOptionReportsTheFirstBadOp) {
  ScratchDir dir("anomaly");
  struct LogOfNegative : TinyModule {
    Tensor training_step(const Batch& batch, int64_t idx) override {
      Tensor loss = TinyModule::training_step(batch, idx);
      return idx == 1 ? volt::log(loss - 1e6) : loss;  // log of a negative number: NaN in the forward
    }
  } m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.detect_anomaly = true;
  Trainer t(o);
  VOLT_EXPECT_ERROR(t.fit(m, make_loader(8, 2)), "detect_anomaly", "forward of Log");
  EXPECT_FALSE(autograd::anomaly_enabled());  // restored when fit ends, also by an exception
  EXPECT_EQ(t.global_step(), 1);
  // Off by default: the same module trains through the NaN.
  LogOfNegative quiet_m;
  Trainer t2(o2(dir.str()));
  EXPECT_NO_THROW(t2.fit(quiet_m, make_loader(8, 2)));
}
