// A non-scalar loss returned from training_step is refused (it used to be averaged by the default
// training_step_end): single device, manual optimisation and dp (where the check is on each replica's returned
// loss, not on the gathered per-replica vector, which the default training_step_end still averages).
#include <gtest/gtest.h>

#include "common/dp_test_module.h"
#include "common/gradcheck.h"
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// TinyModule whose training_step returns the per-sample squared errors reshaped to `shape` (a scalar: their mean).
struct ShapedLoss : TinyModule {
  Shape shape;
  explicit ShapedLoss(Shape s) : shape(std::move(s)) {}
  std::string type_name() const override { return "ShapedLoss"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    Tensor d = predict(batch.input) - batch.target;
    Tensor per_sample = d * d;  // (B)
    if (shape.empty()) return per_sample.mean();
    return per_sample.reshape(shape);
  }
};

// DpNet whose training_step returns the per-sample cross-entropy (B) instead of its mean.
struct PerSampleDpNet : DpNet {
  std::string type_name() const override { return "PerSampleDpNet"; }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor lp = log_softmax(logits(b.input), 1);
    return -gather(lp, 1, b.target.reshape({-1, 1})).reshape({-1});
  }
};

}  // namespace

TEST(TrainingStepLoss, NonScalarLossIsRefusedNamingItsShape) {
  ScratchDir dir("loss_shape");
  ShapedLoss m(Shape{4, 3});
  Trainer t(quiet(dir.str()));
  VOLT_EXPECT_ERROR(t.fit(m, make_loader(12, 12)), "ShapedLoss::training_step returned a loss of shape (4, 3)",
                    "return a scalar (e.g. loss.mean()");
  EXPECT_EQ(t.global_step(), 0);
}

TEST(TrainingStepLoss, OneElementLossesTrain) {
  // A 0-d mean over batches of 4; (1) and (1, 1) losses from batches of one sample.
  for (Shape s : {Shape{}, Shape{1}, Shape{1, 1}}) {
    SCOPED_TRACE(s.size());
    ScratchDir dir("loss_one");
    ShapedLoss m(s);
    auto o = quiet(dir.str());
    o.max_epochs = 1;
    Trainer t(o);
    t.fit(m, make_loader(4, s.empty() ? 4 : 1));
    EXPECT_EQ(t.global_step(), s.empty() ? 1 : 4);
    EXPECT_NE(m.w.to_vector<float>()[0], 0.0f);  // it trained
  }
}

TEST(TrainingStepLoss, ManualOptimisationIsCheckedToo) {
  struct Manual : ShapedLoss {
    Manual() : ShapedLoss(Shape{6}) { automatic_optimization = false; }
    std::string type_name() const override { return "ManualShaped"; }
    Tensor training_step(const Batch& batch, int64_t idx) override {
      Tensor l = ShapedLoss::training_step(batch, idx);
      auto opts = optimizers();
      manual_backward(l.mean());
      opts[0].step();
      opts[0].zero_grad();
      return l;
    }
  };
  ScratchDir dir("loss_manual");
  Manual m;
  Trainer t(quiet(dir.str()));
  VOLT_EXPECT_ERROR(t.fit(m, make_loader(6, 6)), "ManualShaped::training_step returned a loss of shape (6,)",
                    "return a scalar");
}

TEST(TrainingStepLoss, DpChecksEachReplicasLossNotTheGatheredVector) {
  // Per-replica (slice) losses of shape (3): refused on the replica, before any gather.
  {
    PerSampleDpNet m;
    Trainer t(dp_options("dp", "2"));
    VOLT_EXPECT_ERROR(t.fit(m, std::make_shared<data::DataLoader>(dp_data(12), data::DataLoaderOptions{.batch_size = 6})),
                      "PerSampleDpNet::training_step returned a loss of shape (3,)", "return a scalar");
  }
  // Scalar per-replica losses are gathered to (2) and averaged by the default training_step_end: dp trains as
  // before, to single_device's parameters.
  const DpRun c{};
  EXPECT_LE(max_abs_diff(train_dp("dp", "2", c), train_dp("single_device", "1", c)), 1e-12);
}

TEST(TrainingStepLoss, StepOutputsOverrideMayReduceInStepEnd) {
  // The documented escape hatch: named outputs with a per-sample "loss" reduced by an overridden
  // training_step_end (the module owns the reduction).
  struct Reduces : TinyModule {
    StepOutput training_step_outputs(const Batch& b, int64_t) override {
      Tensor d = predict(b.input) - b.target;
      return {{"loss", d * d}};
    }
    Tensor training_step_end(const StepOutput& out) override { return out.at("loss").mean(); }
  };
  ScratchDir dir("loss_end");
  Reduces m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  Trainer t(o);
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(t.global_step(), 2);
}
