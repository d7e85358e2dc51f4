// bench_memory: per-rank training-state memory and step time of the data-parallel strategies. Trains a
// 784-W-W-10 MLP with Adam on synthetic data through the Trainer under each --strategy (repeatable; default
// ddp, zero1, zero2, fsdp) and prints one JSON object per strategy (rank 0; byte figures and step time are the
// maximum over ranks):
//   {"bench":"memory","strategy":"fsdp","world_size":3,"width":1024,"params":...,"param_bytes":...,
//    "grad_bytes":...,"optimizer_state_bytes":...,"model_state_bytes":...,"peak_allocated_bytes":...,
//    "step_ms":...,"repeats":3,"step_ms_min":...,"step_ms_median":...,"step_ms_max":...}
// param_bytes: parameter values resident between steps (the module's parameter storages that hold data, plus
// the shards an optimizer steps under ZeRO/FSDP; under FSDP only the shards); grad_bytes: the gradients alive
// when the optimizer steps (the parameters' .grad plus, under ZeRO/FSDP, the shard gradients the optimizer
// holds); optimizer_state_bytes: the optimizer's state tensors (step counts excluded); model_state_bytes: the
// sum of the three; peak_allocated_bytes: the CPU allocator's high-water mark during fit (activations and
// buffers included). Under fsdp every Linear is a unit (--fsdp-min-num-params, default 1). --repeats N (default 3)
// trains each strategy N times: the byte figures are the last run's (the same every run), step_ms is the median
// run's (the lower middle one of an even count) beside its min and max. CPU only: no device to synchronise.
//   mpirun -np 3 --oversubscribe build/benchmarks/bench_memory --width 1024 --steps 20
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include <volt/data/data.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/runtime/allocator.h>
#include <volt/trainer/trainer.h>

using namespace volt;

namespace {

struct Mlp : TrainModule {
  nn::Linear l1, l2, l3;
  std::shared_ptr<optim::Optimizer> opt;
  int64_t grad_bytes = 0, state_bytes = 0, param_bytes = 0, steps = 0, warmup = 2;
  std::chrono::steady_clock::time_point t0;
  double timed_s = 0;
  explicit Mlp(int64_t width) : l1(28 * 28, width), l2(width, width), l3(width, 10) {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
  }
  std::string type_name() const override { return "Mlp"; }
  Tensor training_step(const Batch& b, int64_t) override {
    return cross_entropy(l3(l2(l1(b.input).relu()).relu()), b.target);
  }
  Optimizers configure_optimizers() override {
    opt = std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-4});
    return opt;
  }
  void on_before_optimizer_step(optim::Optimizer& o, int) override {
    std::set<const TensorImpl*> seen;
    int64_t bytes = 0;
    for (auto& [n, p] : named_parameters()) {
      seen.insert(p.impl());
      if (p.grad().defined()) bytes += p.grad().nbytes();
    }
    for (auto& g : o.param_groups())
      for (auto& p : g.params)
        if (!seen.count(p.impl()) && p.grad().defined()) bytes += p.grad().nbytes();
    grad_bytes = std::max(grad_bytes, bytes);
  }
  void on_train_batch_end(const Tensor&, const Batch&, int64_t) override {
    int64_t bytes = 0;
    for (auto& [k, t] : opt->state_dict())
      if (k.size() < 5 || k.compare(k.size() - 5, 5, ".step") != 0) bytes += t.nbytes();
    state_bytes = std::max(state_bytes, bytes);
    // Resident parameter values: each live storage of the module's parameters once, and the optimizer's own
    // parameters (ZeRO/FSDP shards).
    std::set<const Storage*> storages;
    std::set<const TensorImpl*> mine;
    int64_t resident = 0;
    for (auto& [n, p] : named_parameters()) {
      mine.insert(p.impl());
      if (p.storage()->data && storages.insert(p.storage().get()).second) resident += static_cast<int64_t>(p.storage()->nbytes);
    }
    for (auto& g : opt->param_groups())
      for (auto& p : g.params)
        if (!mine.count(p.impl())) resident += p.nbytes();
    param_bytes = std::max(param_bytes, resident);
    if (++steps == warmup) t0 = std::chrono::steady_clock::now();
    if (steps > warmup) timed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> strategies;
  int64_t width = 1024, steps = 20, batch = 32, fsdp_min = 1;
  int repeats = 3;
  CLI::App app{"Volt per-rank memory of ddp / zero1 / zero2 / fsdp"};
  app.add_option("--strategy", strategies, "ddp | zero1 | zero2 | fsdp (repeatable; default all four)");
  app.add_option("--fsdp-min-num-params", fsdp_min, "fsdp: auto-wrap threshold (1: every Linear is a unit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--width", width, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "optimizer steps per strategy (the first 2 are not timed)")->check(CLI::Range(3, 1 << 30));
  app.add_option("--batch-size", batch, "batch size per rank")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "runs per strategy (step_ms: the median run, with min and max)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (strategies.empty()) strategies = {"ddp", "zero1", "zero2", "fsdp"};

  const int64_t n = batch * 8;
  Tensor x = randn({n, 28 * 28}), y = cast(mul(rand({n}), 9.999), DType::i64);
  auto ds = std::make_shared<data::TensorDataset>(x, y);
  for (const auto& s : strategies) {
    std::vector<double> v, step_ms;
    std::string name;
    int world = 1;
    bool global_zero = false;
    int64_t params = 0;
    for (int r = 0; r < repeats; ++r) {
      TrainerOptions o;
      o.accelerator = "cpu";
      o.devices = "auto";
      o.strategy = s;
      o.max_steps = steps;
      o.max_epochs = -1;
      o.enable_progress_bar = o.enable_model_summary = o.enable_checkpointing = false;
      o.logger = false;
      o.num_sanity_val_steps = 0;
      if (s == "fsdp") o.fsdp_min_num_params = fsdp_min;
      Trainer trainer(o);
      Mlp m(width);
      auto loader =
          std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = batch, .drop_last = true});
      reset_peak_memory_stats(kCPU);
      trainer.fit(m, loader);
      params = 0;
      for (auto& p : m.parameters()) params += p.numel();
      const double ms = m.timed_s * 1e3 / static_cast<double>(m.steps - m.warmup);
      // The maximum over ranks (the group outlives the Trainer).
      v = {static_cast<double>(m.param_bytes), static_cast<double>(m.grad_bytes), static_cast<double>(m.state_bytes),
           static_cast<double>(m.param_bytes + m.grad_bytes + m.state_bytes),
           static_cast<double>(memory_stats(kCPU).peak_allocated), ms};
      Tensor t = from_vector<double>(v);
      dist::default_group().all_reduce(t, dist::ReduceOp::Max);
      v = t.to_vector<double>();
      step_ms.push_back(v[5]);
      name = trainer.strategy().name();
      world = trainer.strategy().world_size();
      global_zero = trainer.strategy().is_global_zero();
    }
    std::sort(step_ms.begin(), step_ms.end());
    const double median = step_ms[(step_ms.size() - 1) / 2];
    if (global_zero)
      std::printf("{\"bench\":\"memory\",\"strategy\":\"%s\",\"world_size\":%d,\"width\":%lld,\"params\":%lld,"
                  "\"param_bytes\":%.0f,\"grad_bytes\":%.0f,\"optimizer_state_bytes\":%.0f,"
                  "\"model_state_bytes\":%.0f,\"peak_allocated_bytes\":%.0f,\"step_ms\":%.3f,\"repeats\":%d,"
                  "\"step_ms_min\":%.3f,\"step_ms_median\":%.3f,\"step_ms_max\":%.3f}\n",
                  name.c_str(), world, static_cast<long long>(width), static_cast<long long>(params), v[0], v[1], v[2],
                  v[3], v[4], median, repeats, step_ms.front(), median, step_ms.back());
  }
  return 0;
}
