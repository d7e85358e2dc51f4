// FSDP (fully sharded, ZeRO stage 3) on N ranks (mpirun -np 2 / 3, and alone as one rank): every rank asserts.
//  - parity: fsdp reaches DDP's parameters after several Adam steps (plain, gradient accumulation, clipping by
//    norm, AdamW with both, 16-mixed, manual optimisation) to 1e-12 in f64, with an auto-wrapped unit, an explicitly
//    wrapped unit called twice per forward, and the root unit; other wrap policies give the same numbers;
//  - memory: between steps every sharded parameter's storage holds no data, and gathering them all raises the
//    allocator's live bytes by exactly the padded model size, world times this rank's shard bytes;
//  - a released parameter read outside its unit is a volt::Error; validation and predict run under fsdp;
//  - the wrap plan (children first, leftovers to the root), and errors for unknown names and misplaced options;
//  - a checkpoint written under fsdp holds the full layout DDP writes and loads back under ddp.
//  - loading a state (in memory, or from a file by byte range) copies each rank's slices into its shards with
//    no gather and no allocation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <volt/distributed/process_group.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/allocator.h>
#include <volt/trainer/checkpoint/sharded_stream.h>
#include <volt/trainer/strategies/fsdp.h>

#include "common/gradcheck.h"
#include "distributed/fsdp_test_module.h"
#include "distributed/zero_test_module.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

int world() { return dist::default_group().world_size(); }

struct Config {
  int64_t accumulate = 1;
  double clip = 0;
  bool adamw = false;
  bool manual = false;
  std::vector<std::string> wrap = {"shared"};
  int64_t min_num_params = 25;
  std::vector<std::string> wrap_hook = {};
  std::string precision = "32-true";
};

// Checks the sharded state after every batch (fsdp only): no parameter data, and the allocator's view of what
// gathering everything costs.
struct ProbeNet : test::FsdpNet {
  bool manual = false;
  int64_t batches = 0, released_violations = 0, gathered_bytes = -1, shard_bytes = 0, gathers_per_step = 0;
  int64_t gathers_before = 0;
  std::vector<std::string> units;  // "name:numel"
  bool on_train_batch_start(const Batch&, int64_t) override {
    if (auto* fsdp = dynamic_cast<FSDPStrategy*>(&trainer()->strategy())) gathers_before = fsdp->gather_count();
    return true;
  }
  Tensor training_step(const Batch& b, int64_t i) override {
    if (!manual) return FsdpNet::training_step(b, i);
    auto opts = optimizers();
    Tensor loss = mse_loss(forward_batch(b.input), b.target);
    manual_backward(loss);
    opts[0].step();
    opts[0].zero_grad();
    return loss.detach();
  }
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    auto* fsdp = dynamic_cast<FSDPStrategy*>(&trainer()->strategy());
    if (!fsdp) return;
    ++batches;
    gathers_per_step = fsdp->gather_count() - gathers_before;
    units.clear();
    for (const auto& u : fsdp->units()) units.push_back(u.name + ":" + std::to_string(u.numel));
    for (auto& [n, p] : named_parameters())
      if (p.storage()->data) ++released_violations;
    const int64_t before = memory_stats(kCPU).allocated;
    {
      FSDPStrategy::FullParams full(*fsdp);
      gathered_bytes = memory_stats(kCPU).allocated - before;
    }
    shard_bytes = 0;
    for (const auto& b : fsdp->sharded_reducer()->buckets()) shard_bytes += b.shard.nbytes();
  }
};

struct Result {
  std::vector<std::vector<double>> params;
  std::string strategy;
  int64_t batches = 0, released_violations = 0, gathered_bytes = 0, shard_bytes = 0, gathers_per_step = 0;
  std::vector<std::string> units;
};

Result run(const std::string& strategy, const Config& c) {
  TrainerOptions o = test::zero_options(strategy);
  o.max_epochs = 2;
  o.accumulate_grad_batches = c.accumulate;
  o.gradient_clip_val = c.clip;
  o.seed = 77;
  o.precision = c.precision;
  if (strategy == "fsdp") {
    o.fsdp_wrap = c.wrap;
    o.fsdp_min_num_params = c.min_num_params;
  }
  Trainer trainer(o);
  ProbeNet m;
  m.adamw = c.adamw;
  m.manual = c.manual;
  m.automatic_optimization = !c.manual;
  m.wrap_hook = c.wrap_hook;
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24),
                                                   data::DataLoaderOptions{.batch_size = 2, .shuffle = true, .seed = 5});
  trainer.fit(m, loader);
  return {test::parameter_values(m), trainer.strategy().name(), m.batches, m.released_violations, m.gathered_bytes,
          m.shard_bytes, m.gathers_per_step, m.units};
}

void check_parity(const Config& c) {
  const Result ddp = run("ddp", c);
  const Result f = run("fsdp", c);
  ASSERT_EQ(f.strategy, "fsdp");
  EXPECT_LE(test::max_abs_diff(f.params, ddp.params), 1e-12) << "max |fsdp - ddp| over the parameters";
  EXPECT_GT(test::max_abs_diff(f.params, test::parameter_values(*std::make_unique<test::FsdpNet>())), 1e-3) << "trained";
  // Between steps nothing of full size: 80 values in 5 buckets; every rank's shards are 1/world of the padded
  // layout, which gathering allocates in full.
  EXPECT_EQ(f.batches, 2 * 24 / (2 * world()));
  EXPECT_EQ(f.released_violations, 0);
  EXPECT_EQ(f.gathered_bytes, world() * f.shard_bytes);
  EXPECT_GE(f.gathered_bytes, 80 * 8);
  EXPECT_LE(f.gathered_bytes, (80 + 5 * (world() - 1)) * 8);
  // encoder.b auto-wrapped (28 >= 25), shared wrapped by name, the root with skip, encoder.a and head.
  EXPECT_EQ(f.units, (std::vector<std::string>{"shared:20", "encoder.b:28", ":32"}));
  if (c.accumulate == 1 && !c.manual) {
    // One gather per bucket: the root's 3 at the step's start (freed after backward, so not refreshed after
    // the optimizer step), encoder.b before its forward and its backward, shared before each of its two
    // forward calls and its backward.
    EXPECT_EQ(f.gathers_per_step, 3 + 2 + 3);
  }
}

}  // namespace

TEST(Fsdp, MatchesDdpWithAdam) { check_parity({}); }
TEST(Fsdp, MatchesDdpWithAccumulation) { check_parity({.accumulate = 3}); }
TEST(Fsdp, MatchesDdpWithClipping) { check_parity({.clip = 0.05}); }
TEST(Fsdp, MatchesDdpWithAdamWClippingAndAccumulation) { check_parity({.accumulate = 2, .clip = 0.05, .adamw = true}); }
// 16-mixed: the grad scaler unscales and checks the shard gradients.
TEST(Fsdp, MatchesDdpUnderTheGradScaler) { check_parity({.clip = 0.05, .precision = "16-mixed"}); }
TEST(Fsdp, ManualOptimizationMatchesDdp) { check_parity({.manual = true}); }

TEST(Fsdp, EveryWrapPolicyGivesTheSameParameters) {
  const Result ddp = run("ddp", {});
  // One unit around a module whose children are not units; every layer a unit; no wrapping (the root only).
  const std::vector<std::pair<Config, std::vector<std::string>>> cases = {
      {Config{.wrap = {"encoder"}, .min_num_params = 0}, {"encoder:52", ":28"}},
      {Config{.wrap = {}, .min_num_params = 1}, {"head:5", "shared:20", "encoder.b:28", "encoder.a:24", ":3"}},
      {Config{.wrap = {}, .min_num_params = 0}, {":80"}},
      {Config{.wrap = {}, .min_num_params = 0, .wrap_hook = {"encoder.a", "head"}}, {"head:5", "encoder.a:24", ":51"}},
  };
  for (const auto& [c, units] : cases) {
    const Result f = run("fsdp", c);
    EXPECT_LE(test::max_abs_diff(f.params, ddp.params), 1e-12);
    EXPECT_EQ(f.released_violations, 0);
    EXPECT_EQ(f.units, units);
  }
}

TEST(Fsdp, PlansUnitsChildrenFirstWithLeftoversAtTheRoot) {
  test::FsdpNet m;
  std::vector<FsdpUnitPlan> plan = plan_fsdp_units(m, {.min_num_params = 25, .modules = {"shared"}});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].name, "shared");
  EXPECT_EQ(plan[0].params, (std::vector<std::string>{"shared.weight", "shared.bias"}));
  EXPECT_EQ(plan[1].name, "encoder.b");
  EXPECT_EQ(plan[1].numel, 28);
  EXPECT_EQ(plan[2].name, "");
  EXPECT_EQ(plan[2].params, (std::vector<std::string>{"skip", "encoder.a.weight", "encoder.a.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(plan[2].numel, 3 + 24 + 5);
  // The parent of a wrapped child holds what is left: encoder.a (24) does not reach 25, nor then does encoder.
  plan = plan_fsdp_units(m, {.min_num_params = 24});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].name, "encoder.b");
  EXPECT_EQ(plan[1].name, "encoder.a");
  EXPECT_EQ(plan[2].numel, 3 + 20 + 5);
  // Frozen parameters stay out of every unit.
  m.head.bias.set_requires_grad(false);
  plan = plan_fsdp_units(m, {});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].numel, 80 - 1);
  try {
    plan_fsdp_units(m, {.modules = {"encoder.c"}});
    FAIL() << "expected an error for a name that matches no module";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp_wrap names module 'encoder.c'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'encoder.a'"), std::string::npos) << e.what();
  }
}

TEST(Fsdp, OptionsUnderAnotherStrategyAreAnError) {
  TrainerOptions o = test::zero_options("ddp");
  o.fsdp_wrap = {"shared"};
  try {
    Trainer trainer(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("options of strategy=\"fsdp\""), std::string::npos) << e.what();
  }
  for (const std::string s : {"fsdp", "fsdp_full_shard", "deepspeed_stage_3"}) {
    Trainer trainer(test::zero_options(s));
    EXPECT_EQ(trainer.strategy().name(), "fsdp");
  }
}

// A parameter read outside its unit's forward/backward is a clear error, not a read of freed memory; its own
// unit's call, evaluation and predict work.
struct PeekNet : test::FsdpNet {
  std::string error;
  bool inside_ok = false;
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    if (!error.empty()) return;
    try {
      (void)shared.weight.to_vector<double>();
    } catch (const Error& e) {
      error = e.what();
    }
  }
};

TEST(Fsdp, ReleasedParameterReadIsAnError) {
  TrainerOptions o = test::zero_options("fsdp");
  test::fsdp_test_wrap(o);
  o.max_steps = 2;
  o.max_epochs = -1;
  o.limit_val_batches = 2;
  o.num_sanity_val_steps = 1;  // the sanity check runs before the first step, through the same gathers
  o.val_check_interval = int64_t{2};
  Trainer trainer(o);
  PeekNet m;
  auto data = test::zero_regression_data(24);
  auto loader = std::make_shared<data::DataLoader>(data, data::DataLoaderOptions{.batch_size = 2});
  auto val = std::make_shared<data::DataLoader>(data, data::DataLoaderOptions{.batch_size = 4});
  trainer.fit(m, loader, val);
  EXPECT_NE(m.error.find("storage released: an FSDP-sharded parameter outside its unit's forward/backward"),
            std::string::npos) << m.error;
  EXPECT_TRUE(trainer.callback_metrics().count("val_loss"));
  // After fit the module holds its full parameters again: a plain forward works, and predict under fsdp gives
  // what it gives under ddp (the same shard of the samples on this rank).
  Tensor x = cast(rand_with_seed({6, 3}, 9, 0), DType::f64);
  EXPECT_EQ(m.forward_batch(x).numel(), 6);
  auto one = std::make_shared<data::DataLoader>(std::make_shared<data::TensorDataset>(x, zeros({6}, DType::f64)),
                                                data::DataLoaderOptions{.batch_size = 6});
  std::map<std::string, std::vector<double>> predicted;
  for (const std::string s : {"ddp", "fsdp"}) {
    Trainer predictor(test::zero_options(s));
    std::vector<Tensor> out = predictor.predict(m, one);
    ASSERT_EQ(out.size(), 1u);
    predicted[s] = out[0].to_vector<double>();
  }
  EXPECT_EQ(predicted["fsdp"], predicted["ddp"]);
  EXPECT_EQ(predicted["fsdp"].size(), static_cast<size_t>(6 / world()));
}

// The checkpoint of an fsdp run has the layout DDP writes (the same keys and shapes, the full values) and
// resumes under DDP with every tensor equal.
TEST(Fsdp, CheckpointHasTheFullLayoutAndResumesUnderDdp) {
  const std::string dir = (fs::temp_directory_path() / "volt_fsdp_ckpt").string();
  auto& pg = dist::default_group();
  if (pg.rank() == 0) fs::create_directories(dir);
  pg.barrier();
  std::map<std::string, nn::StateDict> saved;
  for (const std::string s : {"ddp", "fsdp"}) {
    TrainerOptions o = test::zero_options(s);
    if (s == "fsdp") test::fsdp_test_wrap(o);
    o.max_steps = 3;
    o.max_epochs = -1;
    o.seed = 3;
    o.callbacks.push_back(std::make_shared<test::SaveAtEnd>(dir + "/" + s));
    Trainer trainer(o);
    test::FsdpNet m;
    auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = 2});
    trainer.fit(m, loader);
    saved[s] = nn::load_safetensors(dir + "/" + s + ".safetensors");
  }
  ASSERT_EQ(saved["ddp"].size(), saved["fsdp"].size());
  EXPECT_EQ(saved["ddp"].size(), 9u + 3u * 9u);  // the model, and Adam's step, exp_avg, exp_avg_sq per parameter
  std::map<std::string, Tensor> by_key(saved["fsdp"].begin(), saved["fsdp"].end());
  for (const auto& [k, t] : saved["ddp"]) {
    ASSERT_TRUE(by_key.count(k)) << k;
    const Tensor& tf = by_key[k];
    EXPECT_EQ(t.shape(), tf.shape()) << k;
    const std::vector<double> a = t.to(DType::f64).contiguous().to_vector<double>(), b = tf.to(DType::f64).contiguous().to_vector<double>();
    for (size_t j = 0; j < a.size() && j < b.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-12) << k;
  }
  // fsdp's checkpoint resumes under ddp: the loaded state equals the file.
  struct Check : Callback {
    nn::StateDict expect;
    double worst = -1;
    void on_fit_start(Trainer& trainer, TrainModule& m) override {
      nn::StateDict now = trainer.strategy().module_state_dict(m);
      for (auto& [k, t] : trainer.strategy().optimizer_state(*trainer.optimizers()[0]).tensors) now.emplace_back("optimizer.0." + k, t);
      std::map<std::string, Tensor> got(now.begin(), now.end());
      worst = 0;
      for (auto& [k, t] : expect) {
        if (!got.count(k)) {
          worst = 1e30;
          continue;
        }
        worst = std::max(worst, (got[k].to(DType::f64) - t.to(DType::f64)).abs().max().item());
      }
    }
  };
  for (const std::string s : {"ddp", "fsdp"}) {
    auto check = std::make_shared<Check>();
    check->expect = saved["fsdp"];
    TrainerOptions o = test::zero_options(s);
    if (s == "fsdp") test::fsdp_test_wrap(o);
    o.max_steps = 4;
    o.max_epochs = -1;
    o.callbacks.push_back(check);
    Trainer trainer(o);
    test::FsdpNet m;
    auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = 2});
    trainer.fit(m, loader, nullptr, dir + "/fsdp");
    if (pg.rank() == 0) EXPECT_EQ(check->worst, 0.0) << s;
  }
  pg.barrier();
  if (pg.rank() == 0) fs::remove_all(dir);
}

// Loading under fsdp never gathers a unit: each rank copies only its slice of every sharded parameter into its
// shards, from a state in memory (load_module_state_dict) or from a file by byte range (load_module_from_file,
// what a sharded resume uses), with no allocation on the way. The values gathered afterwards equal the state,
// a unit that was gathered at the call shows the new values, and a wrong state is load_state_dict's error.
TEST(Fsdp, LoadsEachRanksSliceWithoutGathering) {
  struct Load : Callback {
    std::string path;
    int64_t gathers = -1, alloc_increase = -1, gathered_after = -1;
    double file_err = -1, memory_err = -1, pinned_err = -1;
    std::string missing_msg, shape_msg;
    static double max_diff(const nn::StateDict& got, const nn::StateDict& want) {
      std::map<std::string, Tensor> w(want.begin(), want.end());
      double worst = got.size() == want.size() ? 0 : 1e30;
      for (const auto& [k, t] : got)
        worst = std::max(worst, w.count(k) ? (t.to(DType::f64) - w[k].to(DType::f64)).abs().max().item() : 1e30);
      return worst;
    }
    void on_fit_start(Trainer& trainer, TrainModule& m) override {
      auto& fsdp = dynamic_cast<FSDPStrategy&>(trainer.strategy());
      nn::StateDict a, b, placeholders;  // two states unlike the module's
      for (auto& [k, t] : test::FsdpNet().state_dict()) {
        a.emplace_back(k, t * 2.0 + 0.25);
        b.emplace_back(k, t - 1.0);
        placeholders.emplace_back(k, zero_placeholder(t.shape(), t.dtype(), kCPU));
      }
      nn::save_safetensors(path, a);
      const int64_t g0 = fsdp.gather_count();
      reset_peak_memory_stats(kCPU);
      const int64_t before = memory_stats(kCPU).allocated;
      {
        nn::SafetensorsReader reader(path);
        fsdp.load_module_from_file(m, placeholders, reader);
      }
      alloc_increase = memory_stats(kCPU).peak_allocated - before;
      fsdp.load_module_state_dict(m, b);
      gathers = fsdp.gather_count() - g0;
      gathered_after = 0;
      for (auto& [n, p] : m.named_parameters())
        if (p.storage()->data) ++gathered_after;
      {
        FSDPStrategy::FullParams full(fsdp);
        memory_err = max_diff(m.state_dict(), b);
      }
      {
        nn::SafetensorsReader reader(path);
        fsdp.load_module_from_file(m, placeholders, reader);
        FSDPStrategy::FullParams full(fsdp);
        file_err = max_diff(m.state_dict(), a);
        fsdp.load_module_state_dict(m, b);  // gathered now: refreshed from the new shards
        pinned_err = max_diff(m.state_dict(), b);
      }
      nn::StateDict missing(a.begin(), a.end() - 1), misshaped = a;
      misshaped[0].second = zeros({4}, DType::f64);
      try {
        fsdp.load_module_state_dict(m, missing);
      } catch (const Error& e) {
        missing_msg = e.what();
      }
      try {
        fsdp.load_module_state_dict(m, misshaped);
      } catch (const Error& e) {
        shape_msg = e.what();
      }
    }
  };
  auto load = std::make_shared<Load>();
  load->path = (fs::temp_directory_path() / ("volt_fsdp_load_" + std::to_string(::getpid()) + ".safetensors")).string();
  TrainerOptions o = test::zero_options("fsdp");
  test::fsdp_test_wrap(o);
  o.max_steps = 1;
  o.max_epochs = -1;
  o.callbacks.push_back(load);
  Trainer trainer(o);
  test::FsdpNet m;
  ASSERT_EQ(m.state_dict().front().first, "skip");
  auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = 2});
  trainer.fit(m, loader);  // and it trains on from the loaded state
  fs::remove(load->path);
  EXPECT_EQ(load->gathers, 0);
  EXPECT_EQ(load->alloc_increase, 0);
  EXPECT_EQ(load->gathered_after, 0);
  EXPECT_EQ(load->memory_err, 0.0);
  EXPECT_EQ(load->file_err, 0.0);
  EXPECT_EQ(load->pinned_err, 0.0);
  for (const std::string& msg : {load->missing_msg, load->shape_msg})
    EXPECT_NE(msg.find("FsdpNet::load_state_dict: error(s) in loading the state dict"), std::string::npos) << msg;
  EXPECT_NE(load->missing_msg.find("missing keys: head.bias"), std::string::npos) << load->missing_msg;
  EXPECT_NE(load->shape_msg.find("size mismatch: skip (expected (3,), got (4,))"), std::string::npos) << load->shape_msg;
}

// A fit that fails on every rank mid-epoch (the same batch everywhere): the strategy drops its hooks on the way
// out, so the module never calls into a strategy that is gone; its wrapped parameters stay released (each rank
// kept only its shard), and reading one is the clear error, before and after the Trainer is destroyed.
TEST(Fsdp, FailedFitLeavesNoHooksBehind) {
  struct FailingNet : test::FsdpNet {
    Tensor training_step(const Batch& b, int64_t i) override {
      if (i == 3) throw Error("training_step failed on purpose");
      return FsdpNet::training_step(b, i);
    }
  };
  FailingNet m;
  Tensor x = cast(rand_with_seed({4, 3}, 9, 0), DType::f64);
  {
    TrainerOptions o = test::zero_options("fsdp");
    test::fsdp_test_wrap(o);
    o.max_epochs = 1;
    Trainer trainer(o);
    auto loader = std::make_shared<data::DataLoader>(test::zero_regression_data(24),
                                                     data::DataLoaderOptions{.batch_size = 2});
    VOLT_EXPECT_ERROR(trainer.fit(m, loader), "training_step failed on purpose");
    VOLT_EXPECT_ERROR(m.forward_batch(x), "storage released");
  }
  VOLT_EXPECT_ERROR(m.forward_batch(x), "storage released");
}
