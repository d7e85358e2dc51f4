// ddp2 (trainer/strategies/dp.h) on N ranks (mpirun -np 2 / 3, and alone as one rank): every process drives 2
// virtual CPU devices (dp inside the process) and the processes reduce gradients as ddp does. Every rank
// asserts:
//  - parity: ddp2 reaches the parameters of single_device training on the same global batch (every rank trains
//    alone on batch x world samples) and of ddp, after several f64 Adam steps: plain, with gradient accumulation,
//    with clipping by norm (which bites);
//  - the data is sharded over the processes as under ddp (each rank runs n / (batch x world) steps per epoch);
//    effective batch = batch x world; world size = processes; the replicas really ran (2 per step);
//  - the same parity with a module replica per device (dp_replicas: TrainModule::make_replica, the GPU path),
//    the replicas on their own storage and starting every step from the root's values.
#include <gtest/gtest.h>

#include "common/dp_test_module.h"
#include <volt/distributed/process_group.h>
#include <volt/nn/replica.h>
#include <volt/trainer/strategies/dp.h>

using namespace volt;

namespace {

int world() { return dist::default_group().world_size(); }

struct Cfg {
  int64_t accumulate = 1;
  double clip = 0;
  bool replicas = false;  // ddp2 with module replicas (TrainerOptions::dp_replicas)
};

// Counts the replicas that ran each step (the gathered per-replica losses).
struct CountingNet : test::DpNet {
  std::vector<int64_t> replicas;
  Tensor training_step_end(const StepOutput& out) override {
    replicas.push_back(out.at("loss").numel());
    return TrainModule::training_step_end(out);
  }
};

using ReplicableCountingNet = test::Replicable<CountingNet>;

struct Result {
  std::vector<std::vector<double>> params;
  int64_t steps = 0, effective_batch = 0, world = 0;
  std::vector<int64_t> replicas;
  int64_t replica_steps = 0;  // steps run on module replicas, and what they reported (test::Replicable)
  double max_start_diff = 0;
  bool shared_storage = false;
};

Result run(const std::string& strategy, const std::string& devices, int64_t batch, const Cfg& c) {
  TrainerOptions o = test::dp_options(strategy, devices);
  o.max_epochs = 2;
  o.accumulate_grad_batches = c.accumulate;
  o.gradient_clip_val = c.clip;
  o.seed = 11;
  o.dp_replicas = c.replicas && strategy == "ddp2";
  Trainer trainer(o);
  ReplicableCountingNet m;
  auto loader = std::make_shared<data::DataLoader>(test::dp_data(24), data::DataLoaderOptions{.batch_size = batch});
  trainer.fit(m, loader);
  EXPECT_EQ(trainer.strategy().name(), strategy);
  return {test::parameter_values(m), static_cast<int64_t>(m.replicas.size()), trainer.effective_batch_size(batch),
          trainer.world_size(), m.replicas, m.replica_steps, m.max_start_diff, m.shared_storage};
}

void check_parity(const Cfg& c) {
  const int64_t batch = 4;  // per process: 2 samples per virtual device
  const Result ddp2 = run("ddp2", "2", batch, c);
  ASSERT_EQ(ddp2.world, world());
  EXPECT_EQ(ddp2.effective_batch, batch * c.accumulate * world());
  EXPECT_EQ(ddp2.steps, 2 * 24 / (batch * world()));  // this rank's shard only
  for (int64_t r : ddp2.replicas) EXPECT_EQ(r, 2);
  EXPECT_EQ(ddp2.replica_steps, c.replicas ? ddp2.steps : 0);  // one module replica per step (2 devices)
  EXPECT_FALSE(ddp2.shared_storage);
  EXPECT_EQ(ddp2.max_start_diff, 0.0);
  // Every rank alone on the global batch.
  const Result single = run("single_device", "1", batch * world(), c);
  EXPECT_GT(test::max_abs_diff(single.params, test::parameter_values(*std::make_unique<test::DpNet>())), 1e-3);
  EXPECT_LE(test::max_abs_diff(ddp2.params, single.params), 1e-12) << "ddp2 vs single_device";
  const Result ddp = run("ddp", "auto", batch, c);
  EXPECT_LE(test::max_abs_diff(ddp2.params, ddp.params), 1e-12) << "ddp2 vs ddp";
}

}  // namespace

TEST(Ddp2, MatchesSingleDevice) { check_parity({}); }
TEST(Ddp2, MatchesSingleDeviceWithAccumulation) { check_parity({.accumulate = 3}); }
TEST(Ddp2, MatchesSingleDeviceWithClipping) {
  const Result clipped = run("single_device", "1", 4 * world(), {.clip = 0.05});
  const Result free = run("single_device", "1", 4 * world(), {});
  ASSERT_GT(test::max_abs_diff(clipped.params, free.params), 1e-4);
  check_parity({.clip = 0.05});
}

TEST(Ddp2, ReplicasMatchSingleDevice) { check_parity({.replicas = true}); }
TEST(Ddp2, ReplicasMatchSingleDeviceWithAccumulation) { check_parity({.accumulate = 3, .replicas = true}); }
TEST(Ddp2, ReplicasMatchSingleDeviceWithClipping) { check_parity({.clip = 0.05, .replicas = true}); }
TEST(Ddp2, ReplicasRepeatBitForBit) {
  const Result a = run("ddp2", "2", 4, {.replicas = true}), b = run("ddp2", "2", 4, {.replicas = true});
  EXPECT_EQ(a.params, b.params);
}

TEST(Ddp2, DevicesArePerProcess) {
  TrainerOptions o = test::dp_options("ddp2", "3");
  Trainer t(o);
  auto* s = dynamic_cast<DDP2Strategy*>(&t.strategy());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->devices(), 3);
  EXPECT_EQ(s->world_size(), world());  // processes from the launcher, none started for the devices
  EXPECT_EQ(s->global_rank(), dist::default_group().rank());
}
