// The strategy registry (trainer/strategies/registry.h): a strategy a program defines and registers in one line
// is usable by name from TrainerOptions (and so from --strategy), without an edit to the Trainer, TrainerOptions
// or the example flags; options a strategy does not take are refused by name; built-ins can be replaced and
// restored. This file is the whole of the "new strategy": its class and its registration line.
#include <algorithm>

#include <volt/trainer/strategies/registry.h>
#include "common/error_message.h"
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// A single-device strategy that records what the Trainer asks of it, and scales every gradient by 0.5 in
// finish_gradient_sync (a behaviour the built-ins do not have, so the test can see it took effect).
struct HalvingStrategy : SingleDeviceStrategy {
  int setups = 0, binds = 0, teardowns = 0, syncs = 0;
  std::string name() const override { return "halving"; }
  void setup(nn::Module& module) override {
    ++setups;
    SingleDeviceStrategy::setup(module);
  }
  void bind(TrainModule& module) override { ++binds; }
  void finish_gradient_sync() override {
    ++syncs;
    NoGradGuard ng;
    for (auto& p : params) p.grad().copy_(p.grad() * 0.5);
  }
  void teardown(nn::Module& module) override { ++teardowns; }
  std::vector<Tensor> params;
};

HalvingStrategy* g_last = nullptr;

struct Registered {
  Registered() {
    register_strategy("halving", {.make = [](const StrategyOptions& o) {
                                    auto s = std::make_unique<HalvingStrategy>();
                                    g_last = s.get();
                                    return s;
                                  },
                                  .help = "test: gradients halved before each step"});
  }
  ~Registered() { unregister_strategy("halving"); }
};

bool listed(const std::string& name) {
  auto names = strategy_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST(StrategyRegistry, BuiltinsListedInOrderWithAutoFirst) {
  auto names = strategy_names();
  ASSERT_GE(names.size(), 14u);
  EXPECT_EQ(names[0], "auto");
  EXPECT_EQ(names[1], "single_device");
  EXPECT_EQ(names[2], "ddp");
  EXPECT_EQ(names.back(), "ddp2");
  EXPECT_EQ(strategy_help("zero1"), "ddp with the optimizer state sharded over the ranks (ZeRO stage 1)");
  EXPECT_EQ(strategy_help("no_such"), "");
}

TEST(StrategyRegistry, RegisteredStrategyTrainsThroughTheTrainer) {
  ScratchDir dir("registry_halving");
  Registered reg;
  EXPECT_TRUE(listed("halving"));
  EXPECT_EQ(strategy_help("halving"), "test: gradients halved before each step");
  // SGD with lr 0.1 on a halved gradient is SGD with lr 0.05 on the full one: compare with that run.
  auto run = [&](const std::string& strategy, double lr) {
    TinyModule m;
    m.lr = lr;
    auto o = quiet(dir.str());
    o.strategy = strategy;
    o.max_epochs = 1;
    Trainer t(o);
    if (strategy == "halving") {
      EXPECT_EQ(&t.strategy(), g_last);
      g_last->params = m.parameters();
    }
    t.fit(m, make_loader(16, 4));
    return m.w.to_vector<double>();
  };
  const std::vector<double> halved = run("halving", 0.1);
  ASSERT_NE(g_last, nullptr);
  const std::vector<double> plain = run("single_device", 0.05);
  ASSERT_EQ(halved.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(halved[i], plain[i], 1e-6) << i;
  EXPECT_NE(plain[0], 0.0);  // the run trained
}

TEST(StrategyRegistry, TrainerCallsSetupBindAndTeardownOnce) {
  ScratchDir dir("registry_hooks");
  Registered reg;
  TinyModule m;
  auto o = quiet(dir.str());
  o.strategy = "halving";
  o.max_epochs = 1;
  Trainer t(o);
  HalvingStrategy* s = g_last;
  s->params = m.parameters();
  t.fit(m, make_loader(8, 4));
  EXPECT_EQ(s->setups, 1);
  EXPECT_EQ(s->binds, 1);
  EXPECT_EQ(s->teardowns, 1);
  EXPECT_EQ(s->syncs, 2);  // one per optimizer step: 8 samples in batches of 4
}

TEST(StrategyRegistry, UnknownNameListsEveryRegisteredName) {
  Registered reg;
  std::string msg = volt::testing::message_of([] { make_strategy("halvng", DeviceSelection{"cpu", {0}}); });
  EXPECT_NE(msg.find("strategy=\"halvng\" is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"halving\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"fsdp\""), std::string::npos) << msg;
}

TEST(StrategyRegistry, OptionsAStrategyDoesNotTakeAreRefused) {
  Registered reg;
  StrategyOptions o;
  o.devices = DeviceSelection{"cpu", {0}};
  o.fsdp_wrap = {"encoder"};
  std::string msg = volt::testing::message_of([&] { make_strategy("halving", o); });
  EXPECT_NE(msg.find("fsdp_min_num_params / fsdp_wrap are options of strategy=\"fsdp\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"halving\""), std::string::npos) << msg;
  o.fsdp_wrap.clear();
  o.dp_replicas = true;
  msg = volt::testing::message_of([&] { make_strategy("halving", o); });
  EXPECT_NE(msg.find("dp_replicas is an option of strategy=\"dp\" and \"ddp2\""), std::string::npos) << msg;
}

TEST(StrategyRegistry, BadRegistrationsAreErrors) {
  EXPECT_NE(volt::testing::message_of([] { register_strategy("", {.make = [](const StrategyOptions&) {
                                                         return std::make_unique<SingleDeviceStrategy>();
                                                       }}); })
                .find("must be non-empty and not \"auto\""),
            std::string::npos);
  EXPECT_NE(volt::testing::message_of([] { register_strategy("auto", {.make = [](const StrategyOptions&) {
                                                             return std::make_unique<SingleDeviceStrategy>();
                                                           }}); })
                .find("not \"auto\""),
            std::string::npos);
  EXPECT_NE(volt::testing::message_of([] { register_strategy("nothing", StrategyEntry{}); }).find("has no factory"),
            std::string::npos);
  EXPECT_FALSE(listed("nothing"));
  register_strategy("null_result", {.make = [](const StrategyOptions&) { return std::unique_ptr<Strategy>(); }});
  EXPECT_NE(volt::testing::message_of([] { make_strategy("null_result", DeviceSelection{"cpu", {0}}); })
                .find("the factory of strategy=\"null_result\" returned no strategy"),
            std::string::npos);
  EXPECT_TRUE(unregister_strategy("null_result"));
  EXPECT_FALSE(unregister_strategy("null_result"));
}

TEST(StrategyRegistry, ABuiltinCanBeReplacedAndRestored) {
  register_strategy("single_device", {.make = [](const StrategyOptions&) {
                                        return std::make_unique<HalvingStrategy>();
                                      }});
  EXPECT_EQ(make_strategy("single_device", DeviceSelection{"cpu", {0}})->name(), "halving");
  EXPECT_EQ(make_strategy("auto", DeviceSelection{"cpu", {0}})->name(), "halving");  // auto follows the entry
  EXPECT_TRUE(unregister_strategy("single_device"));
  EXPECT_EQ(make_strategy("single_device", DeviceSelection{"cpu", {0}})->name(), "single_device");
  EXPECT_TRUE(listed("single_device"));  // a built-in is restored, never removed
}
