// sync_dist design: numerators and denominators reduced separately (global weighted mean with uneven batch
// counts), and one Strategy::reduce_values call per op for all of a step's values. A fake two-rank strategy
// stands in for DDP: it adds the vectors "the other rank" contributed.
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/registry.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {
struct FakeTwoRank : SingleDeviceStrategy {
  std::vector<double> other;                      // what the other rank contributes to the next Sum
  std::vector<std::vector<double>> seen;          // every reduce_values input
  std::vector<dist::ReduceOp> ops;
  int decisions = 0;
  std::string name() const override { return "fake_ddp"; }
  int world_size() const override { return 2; }
  void reduce_values(std::vector<double>& v, dist::ReduceOp op) override {
    seen.push_back(v);
    ops.push_back(op);
    if (op == dist::ReduceOp::Sum && other.size() == v.size())
      for (size_t i = 0; i < v.size(); ++i) v[i] += other[i];
  }
  bool reduce_decision(bool d, bool all) override {
    ++decisions;
    return d;
  }
};
FakeTwoRank* g_fake = nullptr;
std::unique_ptr<Strategy> make_fake(const DeviceSelection&) {
  auto s = std::make_unique<FakeTwoRank>();
  g_fake = s.get();
  return s;
}
}  // namespace

TEST(SyncDist, EpochMeanIsGlobalWeightedMeanWithUnevenBatches) {
  LogOptions sync{.on_step = false, .on_epoch = true, .sync_dist = true};
  // Rank 1: one batch of 2 with value 3.
  FakeTwoRank r1;
  ResultCollection c1("train");
  c1.log("training_step", "v", 3.0, sync, 2);
  c1.compute_epoch(r1);
  ASSERT_EQ(r1.seen.size(), 1u);
  EXPECT_EQ(r1.seen[0], (std::vector<double>{6.0, 2.0}));  // numerator, denominator (floating point)
  // Rank 0: two batches of 4 with values 1 and 2, reduced with rank 1's contribution.
  FakeTwoRank r0;
  r0.other = r1.seen[0];
  ResultCollection c0("train");
  c0.log("training_step", "v", full({}, 1.0), sync, 4);
  c0.log("training_step", "v", full({}, 2.0), sync, 4);
  c0.compute_epoch(r0);
  EXPECT_DOUBLE_EQ(c0.epoch_callback_metrics().at("v"), (4.0 + 8.0 + 6.0) / 10.0);  // not the mean of rank means
}

TEST(SyncDist, OneReduceCallPerOpPerStep) {
  FakeTwoRank s;
  ResultCollection c("train");
  c.begin_step();
  c.log("training_step", "a", 1.0, {.sync_dist = true}, 4);
  c.log("training_step", "b", full({}, 2.0), {.reduce_fx = "sum", .sync_dist = true}, 4);
  c.log("training_step", "c", 3.0, {.reduce_fx = "max", .sync_dist = true}, 4);
  c.log("training_step", "local", 9.0, {}, 4);
  s.other = {10.0, 20.0};
  c.end_step(s);
  ASSERT_EQ(s.seen.size(), 2u);  // one Sum call (a, b) and one Max call (c)
  EXPECT_EQ(s.seen[0], (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(s.ops[0], dist::ReduceOp::Sum);
  EXPECT_EQ(s.ops[1], dist::ReduceOp::Max);
  auto m = c.step_logger_metrics();
  EXPECT_DOUBLE_EQ(m.at("a"), (1.0 + 10.0) / 2);  // mean over ranks
  EXPECT_DOUBLE_EQ(m.at("b"), 2.0 + 20.0);
  EXPECT_DOUBLE_EQ(m.at("local"), 9.0);
}

TEST(SyncDist, TrainerRoutesThroughStrategyAndAgreesOnStop) {
  ScratchDir dir("fake_ddp");
  register_ddp_strategy(&make_fake);
  TinyModule m;
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t, const Tensor& loss) {
    mm.log("loss", loss, {.sync_dist = true});
    mm.log("loss2", loss, {.on_epoch = true, .sync_dist = true});
  };
  auto o = quiet(dir.str());
  o.devices = "2";
  o.max_epochs = 1;
  Trainer t(o);
  EXPECT_EQ(t.strategy().name(), "fake_ddp");
  EXPECT_EQ(m.world_size(), 1);  // not attached yet
  t.fit(m, make_loader(12, 4));
  EXPECT_EQ(m.world_size(), 2);
  // 3 steps: one Sum call each; epoch end: one Sum call with loss2's numerator and denominator.
  ASSERT_EQ(g_fake->seen.size(), 4u);
  EXPECT_EQ(g_fake->seen[0].size(), 2u);
  EXPECT_EQ(g_fake->seen[3].size(), 2u);
  EXPECT_DOUBLE_EQ(g_fake->seen[3][1], 12.0);
  EXPECT_GE(g_fake->decisions, 1);
  register_ddp_strategy(nullptr);  // back to the built-in DDP strategy
}
