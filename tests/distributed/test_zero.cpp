// ZeRO stages 1 and 2 on N ranks (mpirun -np 2 / 3, and alone as one rank): every rank asserts.
//  - parity: zero1 and zero2 reach DDP's parameters after several Adam steps (plain, with gradient accumulation,
//    with clipping by norm, AdamW with clipping and accumulation), to 1e-12 in f64 (reductions round
//    differently: reduce-scatter divides by the world size where DDP multiplies by its inverse);
//  - memory: each rank's optimizer state (summed over the optimizer's state tensors) is its shards' size, i.e.
//    DDP's / world plus at most the padding, and so are the bytes the allocator statistics see the first
//    optimizer step add (where Adam creates its state); after a synced backward the parameters hold no gradient
//    and the optimizer's shard gradients hold chunk values;
//  - overlap: every bucket's reduction is launched while backward runs;
//  - manual optimisation (manual_backward, ManualOptimizer::step) matches DDP too;
//  - the sharded layout: padding, contiguous slices, gather/slice round trip, in-place large parameters;
//  - a checkpoint written under zero2 holds the same full-layout optimizer state as one written under DDP, and
//    loads back under zero1, DDP and (every rank alone) a single device;
//  - strategy names: the aliases, and an unknown name listing every accepted one.
#include <gtest/gtest.h>

#include <filesystem>

#include <volt/distributed/process_group.h>
#include <volt/distributed/sharded_reducer.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/allocator.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/strategies/registry.h>
#include <volt/trainer/strategies/zero.h>

#include "distributed/zero_test_module.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

dist::ProcessGroup& pg() { return dist::default_group(); }
int world() { return pg().world_size(); }

struct RunConfig {
  int64_t accumulate = 1;
  double clip = 0;
  bool adamw = false;
  std::string precision = "32-true";
};

// Records what the optimizer sees: state bytes after each step, gradients before it.
struct ProbeMlp : test::ZeroMlp {
  std::shared_ptr<optim::Optimizer> opt;
  int64_t state_bytes = -1;         // optimizer state tensors, step counts excluded
  int64_t optimizer_grad_numel = 0;  // the optimizer's parameters' gradients, before the step
  int64_t module_grads_defined = 0;  // module parameters that still hold a .grad before the step
  int64_t first_step_bytes = -1;      // CPU bytes allocated by the first optimizer step (memory_stats), kept after it
  int64_t allocated_before_step = 0;
  uint64_t seq_before = 0, max_backward_collectives = 0;  // collectives launched while backward ran
  void on_before_backward(const Tensor&) override { seq_before = pg().sequence_number(); }
  void on_after_backward() override {
    max_backward_collectives = std::max<uint64_t>(max_backward_collectives, pg().sequence_number() - seq_before);
  }
  Optimizers configure_optimizers() override {
    Optimizers o = ZeroMlp::configure_optimizers();
    opt = o.optimizers[0];
    return o;
  }
  void on_before_optimizer_step(optim::Optimizer& o, int) override {
    optimizer_grad_numel = 0;
    for (auto& g : o.param_groups())
      for (auto& p : g.params)
        if (p.grad().defined()) optimizer_grad_numel += p.grad().numel();
    module_grads_defined = 0;
    for (auto& [n, p] : named_parameters()) module_grads_defined += p.grad().defined() ? 1 : 0;
    allocated_before_step = memory_stats(kCPU).allocated;
  }
  void on_before_zero_grad(optim::Optimizer&) override {
    if (first_step_bytes < 0) first_step_bytes = memory_stats(kCPU).allocated - allocated_before_step;
  }
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    state_bytes = 0;
    for (auto& [k, t] : opt->state_dict())
      if (k.size() < 5 || k.compare(k.size() - 5, 5, ".step") != 0) state_bytes += t.nbytes();
  }
};

struct RunResult {
  std::vector<std::vector<double>> params;
  int64_t state_bytes = 0, optimizer_grad_numel = 0, module_grads_defined = 0, first_step_bytes = 0;
  std::string strategy;
  uint64_t max_backward_collectives = 0;
};

RunResult run(const std::string& strategy, const RunConfig& c) {
  TrainerOptions o = test::zero_options(strategy);
  o.max_epochs = 2;
  o.accumulate_grad_batches = c.accumulate;
  o.gradient_clip_val = c.clip;
  o.seed = 77;
  o.precision = c.precision;
  Trainer trainer(o);
  ProbeMlp m;
  m.adamw = c.adamw;
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24),
                                                   data::DataLoaderOptions{.batch_size = 2, .shuffle = true, .seed = 5});
  trainer.fit(m, loader);
  EXPECT_EQ(trainer.grad_scaler() != nullptr, c.precision == "16-mixed");
  return {test::parameter_values(m), m.state_bytes,      m.optimizer_grad_numel,    m.module_grads_defined,
          m.first_step_bytes,         trainer.strategy().name(), m.max_backward_collectives};
}

// Values of the layout with two buckets (9 and 20 values, in reverse registration order): each rank's share.
int64_t chunk_of(int64_t n) { return (n + world() - 1) / world(); }

void check_parity(const RunConfig& c) {
  const RunResult ddp = run("ddp", c);
  ASSERT_EQ(ddp.strategy, "ddp");
  EXPECT_EQ(ddp.state_bytes, 2 * 29 * 8);  // Adam: exp_avg and exp_avg_sq, f64, for all 29 values
  EXPECT_EQ(ddp.module_grads_defined, 5);
  // The allocator statistics agree: the first step (where Adam creates its state) keeps exactly those bytes.
  EXPECT_EQ(ddp.first_step_bytes, ddp.state_bytes);
  for (const std::string s : {"zero1", "zero2"}) {
    SCOPED_TRACE(s);
    const RunResult z = run(s, c);
    ASSERT_EQ(z.strategy, s);
    const double d = test::max_abs_diff(z.params, ddp.params);
    EXPECT_LE(d, 1e-12) << "max |zero - ddp| over the parameters";
    // Optimizer state only for this rank's shards: DDP's / world, plus the padding of each bucket.
    const int64_t shard_values = chunk_of(9) + chunk_of(20);
    EXPECT_EQ(z.state_bytes, 2 * shard_values * 8);
    EXPECT_GE(z.state_bytes * world(), ddp.state_bytes);
    EXPECT_LE(z.state_bytes * world(), ddp.state_bytes + 2 * 2 * (world() - 1) * 8);
    EXPECT_EQ(z.first_step_bytes, z.state_bytes) << "bytes the first optimizer step added (memory_stats)";
    // The optimizer steps shard gradients; the parameters' full gradients were released after the reduction.
    EXPECT_EQ(z.optimizer_grad_numel, shard_values);
    EXPECT_EQ(z.module_grads_defined, 0);
    // Overlap: both buckets' reductions were launched while backward still ran, not after it.
    EXPECT_EQ(z.max_backward_collectives, 2u);
  }
}

TEST(Zero, MatchesDdpWithAdam) { check_parity({}); }
TEST(Zero, MatchesDdpWithAccumulation) { check_parity({.accumulate = 3}); }
TEST(Zero, MatchesDdpWithClipping) {
  // The clip must bite, or the test would not tell a global norm from a per-shard one.
  const RunResult clipped = run("ddp", {.clip = 0.05}), free = run("ddp", {});
  ASSERT_GT(test::max_abs_diff(clipped.params, free.params), 1e-4);
  check_parity({.clip = 0.05});
}
// 16-mixed: the grad scaler unscales and checks the optimizer's shard gradients (the inf check agreed by all
// ranks) and steps the shards.
TEST(Zero, MatchesDdpUnderTheGradScaler) { check_parity({.clip = 0.05, .precision = "16-mixed"}); }
TEST(Zero, MatchesDdpWithAdamWClippingAndAccumulation) { check_parity({.accumulate = 2, .clip = 0.05, .adamw = true}); }

// Manual optimisation: manual_backward reduces, ManualOptimizer::step updates the shards and gathers them.
struct ManualMlp : test::ZeroMlp {
  ManualMlp() { automatic_optimization = false; }
  Tensor training_step(const Batch& b, int64_t) override {
    auto opts = optimizers();
    Tensor loss = mse_loss(forward_batch(b.input), b.target);
    manual_backward(loss);
    opts[0].step();
    opts[0].zero_grad();
    return loss.detach();
  }
};

TEST(Zero, ManualOptimizationMatchesDdp) {
  std::map<std::string, std::vector<std::vector<double>>> out;
  for (const std::string s : {"ddp", "zero1", "zero2"}) {
    TrainerOptions o = test::zero_options(s);
    o.max_epochs = 2;
    Trainer trainer(o);
    ManualMlp m;
    auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = 2});
    trainer.fit(m, loader);
    EXPECT_EQ(trainer.global_step(), 2 * 24 / (2 * world()));
    out[s] = test::parameter_values(m);
  }
  EXPECT_LE(test::max_abs_diff(out["zero1"], out["ddp"]), 1e-12);
  EXPECT_LE(test::max_abs_diff(out["zero2"], out["ddp"]), 1e-12);
  EXPECT_GT(test::max_abs_diff(out["zero2"], test::parameter_values(*std::make_unique<test::ZeroMlp>())), 1e-3);
}

TEST(Zero, ShardedLayoutPadsAndRoundTrips) {
  // 7 values in one bucket: chunk = ceil(7 / world), rank r owns [r * chunk, (r + 1) * chunk), zero padded.
  Tensor a = from_vector<double>({1, 2, 3, 4, 5}).set_requires_grad(true);
  Tensor b = from_vector<double>({6, 7}).set_requires_grad(true);
  dist::ShardedReducer red(pg(), {{"a", a, 0}, {"b", b, 0}}, dist::ShardedReducer::Stage::two);
  ASSERT_EQ(red.buckets().size(), 1u);
  const auto& bucket = red.buckets()[0];
  EXPECT_EQ(bucket.numel, 7);
  EXPECT_EQ(bucket.chunk, chunk_of(7));
  // Reverse registration order: b first, then a.
  const std::vector<double> flat = {6, 7, 1, 2, 3, 4, 5};
  std::vector<double> mine = bucket.shard.to_vector<double>();
  ASSERT_EQ(static_cast<int64_t>(mine.size()), bucket.chunk);
  for (int64_t k = 0; k < bucket.chunk; ++k) {
    const int64_t at = pg().rank() * bucket.chunk + k;
    EXPECT_EQ(mine[k], at < 7 ? flat[at] : 0.0) << "element " << at;
  }
  Tensor back = red.gather_flat(0, bucket.shard);
  EXPECT_EQ(back.to_vector<double>(), flat);
  EXPECT_EQ(red.slice_flat(0, back).to_vector<double>(), mine);
  // A reduce-scattered step: every rank's gradient is rank + 1 per element; the shard gets the average.
  Tensor loss = (a.sum() + b.sum()) * static_cast<double>(pg().rank() + 1);
  loss.backward();
  red.finalize();
  EXPECT_FALSE(a.grad().defined());
  const double avg = (world() + 1) / 2.0;
  std::vector<double> g = bucket.shard.grad().to_vector<double>();
  for (int64_t k = 0; k < bucket.chunk; ++k)
    EXPECT_DOUBLE_EQ(g[k], pg().rank() * bucket.chunk + k < 7 ? avg : 0.0);
  // Updating the shard and gathering writes the parameters.
  {
    NoGradGuard ng;
    Tensor s = bucket.shard;
    mul_(s, 10.0);
  }
  red.gather_parameters(0);
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{10, 20, 30, 40, 50}));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{60, 70}));
}

TEST(Zero, LargeParametersAreReducedInPlace) {
  // 6 values divide by 1, 2 and 3 ranks: reduced in the gradient itself; 7 values alone, padded (except on 1).
  for (auto stage : {dist::ShardedReducer::Stage::one, dist::ShardedReducer::Stage::two}) {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}).set_requires_grad(true);
  Tensor b = from_vector<double>({1, 2, 3, 4, 5, 6, 7}).set_requires_grad(true);
  Tensor c = from_vector<double>({1}).set_requires_grad(true);
  dist::ShardedReducer red(pg(), {{"a", a, 0}, {"b", b, 0}, {"c", c, 0}}, stage, {.in_place_bytes = 48});
  ASSERT_EQ(red.buckets().size(), 3u);  // c (small) | b | a, in reverse registration order
  EXPECT_FALSE(red.buckets()[0].in_place);
  EXPECT_EQ(red.buckets()[1].in_place, world() == 1);
  EXPECT_TRUE(red.buckets()[2].in_place);
  Tensor loss = ((a * a).sum() + (b * b).sum() + c.sum()) * static_cast<double>(pg().rank() + 1);
  loss.backward();
  red.finalize();
  const double avg = (world() + 1) / 2.0;
  for (int k : {1, 2}) {
    const auto& bk = red.buckets()[static_cast<size_t>(k)];
    std::vector<double> g = bk.shard.grad().to_vector<double>();
    for (int64_t j = 0; j < bk.chunk; ++j) {
      const int64_t at = pg().rank() * bk.chunk + j;  // d/dx of x^2 * (rank + 1), averaged: 2 x avg
      EXPECT_DOUBLE_EQ(g[j], at < bk.numel ? 2.0 * (at + 1) * avg : 0.0) << "bucket " << k << " element " << at;
    }
  }
  EXPECT_FALSE(a.grad().defined());
  }
}

TEST(Zero, UnusedParameterIsAnErrorNamingIt) {
  Tensor a = from_vector<double>({1, 2}).set_requires_grad(true);
  Tensor b = from_vector<double>({3}).set_requires_grad(true);
  dist::ShardedReducer red(pg(), {{"a", a, 0}, {"b", b, 1}}, dist::ShardedReducer::Stage::one);
  EXPECT_EQ(red.buckets().size(), 2u);  // owners never share a bucket
  a.sum().backward();
  try {
    red.finalize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

// ---- checkpoints ---------------------------------------------------------------------------------------------

std::string shared_dir(const std::string& name) {
  std::string dir = pg().rank() == 0 ? (fs::temp_directory_path() / ("volt_zero_" + name + "_" + std::to_string(::getpid()))).string() : "";
  // Every rank writes to rank 0's directory.
  std::vector<int64_t> len{static_cast<int64_t>(dir.size())};
  Tensor l = from_vector<int64_t>(len);
  pg().broadcast(l, 0);
  std::vector<uint8_t> bytes(static_cast<size_t>(l.item<int64_t>()), 0);
  if (pg().rank() == 0) bytes.assign(dir.begin(), dir.end());
  Tensor b = from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())});
  pg().broadcast(b, 0);
  std::vector<uint8_t> out = b.to_vector<uint8_t>();
  return std::string(out.begin(), out.end());
}

std::map<std::string, std::vector<double>> as_values(const nn::StateDict& sd) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [k, t] : sd) out[k] = t.to(DType::f64).contiguous().to_vector<double>();
  return out;
}

std::map<std::string, std::vector<double>> optimizer_tensors_in(const std::string& stem) {
  nn::StateDict opt;
  for (auto& [k, t] : nn::load_safetensors(stem + ".safetensors"))
    if (k.rfind("optimizer.0.", 0) == 0) opt.emplace_back(k.substr(12), t);
  return as_values(opt);
}

void fit_with(const std::string& strategy, TrainModule& m, int64_t steps, const std::string& save,
              const std::string& resume, test::CaptureAtStart* capture) {
  TrainerOptions o = test::zero_options(strategy);
  o.max_steps = steps;
  o.max_epochs = -1;
  o.seed = 3;
  o.callbacks.push_back(std::make_shared<test::SaveAtEnd>(save));
  if (capture) o.callbacks.push_back(std::shared_ptr<Callback>(capture, [](Callback*) {}));
  Trainer trainer(o);
  // A global batch of 12 at any world size: 2 batches per epoch everywhere, so a checkpoint resumes at any.
  const int64_t batch = 12 / trainer.strategy().world_size();
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24),
                                                   data::DataLoaderOptions{.batch_size = batch, .shuffle = true, .seed = 5});
  trainer.fit(m, loader, nullptr, resume);
}

TEST(Zero, CheckpointHasTheFullLayoutAndResumesUnderEveryStrategy) {
  const std::string dir = shared_dir("ckpt");
  {
    test::ZeroMlp a, b;
    fit_with("zero2", a, 12, dir + "/zero2", "", nullptr);
    fit_with("ddp", b, 12, dir + "/ddp", "", nullptr);
    // The same keys, shapes and (to rounding) values as DDP's checkpoint.
    auto z = optimizer_tensors_in(dir + "/zero2"), d = optimizer_tensors_in(dir + "/ddp");
    ASSERT_EQ(z.size(), d.size());
    ASSERT_EQ(d.size(), 5u * 3u);  // 5 parameters x (step, exp_avg, exp_avg_sq)
    for (auto& [k, v] : d) {
      ASSERT_TRUE(z.count(k)) << k;
      ASSERT_EQ(z[k].size(), v.size()) << k;
      for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(z[k][i], v[i], 1e-12) << k << "[" << i << "]";
    }
  }
  const auto saved = optimizer_tensors_in(dir + "/zero2");
  std::map<std::string, std::vector<std::vector<double>>> resumed;
  for (const std::string s : {"ddp", "zero2", "zero1", "single_device"}) {
    SCOPED_TRACE(s);
    test::ZeroMlp m;
    test::CaptureAtStart cap;
    // single_device: every rank alone, the way a one-process job would load it.
    fit_with(s, m, 14, dir + "/resumed_" + s + "_" + std::to_string(pg().rank()), dir + "/zero2", &cap);
    EXPECT_EQ(as_values(cap.opt_state), saved);  // exactly: gathering and slicing only move values
    EXPECT_EQ(cap.hyper.count("state.0.0.step"), 1u);
    EXPECT_EQ(cap.hyper["state.0.0.step"], 12.0);
    // Training on from the loaded state: the same two steps under every strategy (the same global batches).
    resumed[s] = test::parameter_values(m);
    EXPECT_LE(test::max_abs_diff(resumed[s], resumed["ddp"]), 1e-12);
    EXPECT_GT(test::max_abs_diff(resumed[s], cap.params), 1e-6);  // it did train on
  }
  pg().barrier();
  if (pg().rank() == 0) fs::remove_all(dir);
}

// A trainable parameter that no optimizer holds would have no rank to keep its gradient: refused, named.
struct PartialOptimizerMlp : test::ZeroMlp {
  Optimizers configure_optimizers() override { return optim::Adam({w1, b1, w2, b2}); }
};

TEST(Zero, ParameterOutsideEveryOptimizerIsAnError) {
  TrainerOptions o = test::zero_options("zero2");
  o.max_steps = 1;
  Trainer trainer(o);
  PartialOptimizerMlp m;
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = 2});
  try {
    trainer.fit(m, loader);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("zero2: parameter 'skip' requires grad but no optimizer holds it"), std::string::npos) << msg;
  }
}

// ---- names ---------------------------------------------------------------------------------------------------

TEST(Zero, StrategyNames) {
  EXPECT_EQ(parse_zero_strategy("zero1"), ZeroStage::one);
  EXPECT_EQ(parse_zero_strategy("deepspeed_stage_1"), ZeroStage::one);
  EXPECT_EQ(parse_zero_strategy("zero2"), ZeroStage::two);
  EXPECT_EQ(parse_zero_strategy("deepspeed_stage_2"), ZeroStage::two);
  EXPECT_EQ(parse_zero_strategy("ddp_sharded"), ZeroStage::two);
  EXPECT_EQ(parse_zero_strategy("zero3"), std::nullopt);
  for (auto [name, expect] : std::vector<std::pair<std::string, std::string>>{
           {"deepspeed_stage_1", "zero1"}, {"deepspeed_stage_2", "zero2"}, {"ddp_sharded", "zero2"}}) {
    TrainerOptions o = test::zero_options(name);
    o.max_steps = 1;
    Trainer t(o);
    EXPECT_EQ(t.strategy().name(), expect);
    EXPECT_EQ(t.strategy().world_size(), world());
  }
  try {
    Trainer t(test::zero_options("zero3"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : strategy_names()) EXPECT_NE(msg.find("\"" + n + "\""), std::string::npos) << n << ": " << msg;
    EXPECT_NE(msg.find("strategy=\"zero3\""), std::string::npos) << msg;
  }
}

}  // namespace
