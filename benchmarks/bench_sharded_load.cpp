// bench_sharded_load: each rank's peak host memory (RSS) while a sharded checkpoint (checkpoint_layout =
// sharded) is loaded by Trainer::fit(ckpt_path), against the bound "this rank's shard file + the largest single
// tensor of the checkpoint" (docs/reliability.md). Run it under mpirun (2 ranks or more):
//
//   mpirun -np 2 build/benchmarks/bench_sharded_load [--strategy zero1|fsdp (repeatable; default both)]
//       [--phase save|load|both] [--dir D] [--width 3072 --layers 13 --out 512] [--repeats 3]
//
// The default model is bench_checkpoint_stall's: 13 x Linear(3072, 3072) + Linear(3072, 512), 124,296,704
// parameters trained with Adam, so the checkpoint holds the parameters and both moments (~1.5 GB in f32).
// --phase save trains one step and writes `<dir>/<strategy>` with every rank's optimizer shards in its own file
// (<dir>/<strategy>.shards/rank-<r>-of-<N>.safetensors) and the module's state in <dir>/<strategy>.safetensors.
// --phase load (run it in a fresh mpirun, as the log in docs/benchmarks/logs does) builds the model and a Trainer
// with max_steps = 1, so fit restores the checkpoint and has nothing left to train. The measurement starts after
// the strategy has set the model and its optimizers up, as late as fit allows before the restore: fit prepares
// the validation loader first thing in run_fit, and the validation dataset's size() is asked then (and
// limit_val_batches = 0 keeps validation off). There the CPU allocator's cache is emptied, malloc_trim returns
// freed heap, VmRSS is read and the kernel's high-water mark is reset (`echo 5 > /proc/self/clear_refs`); at
// on_fit_start, right after the restore, VmHWM - that VmRSS is the peak increase while loading. The CPU
// allocator's own peak (memory_stats().peak_allocated above what was allocated at the start) is printed beside
// it. --repeats N loads N times in the same process (each with a fresh model and Trainer): min/median/max.
//
// One JSON line per rank and strategy:
//   {"bench":"sharded_load","strategy":"zero1","world_size":2,"rank":0,"params":124296704,"repeats":3,
//    "shard_bytes":...,"main_bytes":...,"largest_tensor_bytes":...,"bound_bytes":...,
//    "rss_increase_bytes_min":...,"rss_increase_bytes_median":...,"rss_increase_bytes_max":...,
//    "alloc_increase_bytes_max":...,"load_s_median":...,"pass":true}
// pass: the largest increase over the repeats is at most bound_bytes. The exit status is 1 when a rank fails.
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/data/data.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/runtime/allocator.h>
#include <volt/trainer/trainer.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

int64_t g_width = 3072, g_layers = 13, g_out = 512;
constexpr int64_t kBatch = 2;

// 13 x Linear(3072, 3072) + Linear(3072, 512) by default: 124,296,704 parameters (GPT-2 small has 124.4M).
struct Wide : TrainModule {
  std::vector<std::unique_ptr<nn::Linear>> layers;
  Wide() {
    for (int64_t i = 0; i < g_layers; ++i) {
      layers.push_back(std::make_unique<nn::Linear>(g_width, g_width));
      register_module("fc" + std::to_string(i), *layers.back());
    }
    layers.push_back(std::make_unique<nn::Linear>(g_width, g_out));
    register_module("head", *layers.back());
  }
  std::string type_name() const override { return "WideSharded"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    Tensor h = batch.input;
    for (size_t i = 0; i + 1 < layers.size(); ++i) h = relu((*layers[i])(h));
    return mse_loss((*layers.back())(h), batch.target);
  }
  Optimizers configure_optimizers() override {
    return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-5});
  }
};

// kB figure of a /proc/self/status line ("VmRSS:", "VmHWM:"), in bytes.
int64_t proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  return -1;
}

struct Probe {
  bool armed = false, taken = false;
  int64_t rss_before = 0, alloc_before = 0;
  std::chrono::steady_clock::time_point t0;
  void take() {
    empty_cache(kCPU);
    malloc_trim(0);
    rss_before = proc_status_bytes("VmRSS:");
    std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
    reset_peak_memory_stats(kCPU);
    alloc_before = memory_stats(kCPU).allocated;
    taken = true;
    t0 = std::chrono::steady_clock::now();
  }
};
Probe g_probe;

// The validation set: its size() is asked when fit prepares the validation loader, just before the restore.
struct ProbeDataset : data::TensorDataset {
  using data::TensorDataset::TensorDataset;
  int64_t size() const override {
    if (g_probe.armed && !g_probe.taken) g_probe.take();
    return data::TensorDataset::size();
  }
};

struct Measure : Callback {
  int64_t hwm = 0, alloc_peak = 0;
  double load_s = 0;
  std::string state_key() const override { return "Measure"; }
  void on_fit_start(Trainer&, TrainModule&) override {
    load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_probe.t0).count();
    hwm = proc_status_bytes("VmHWM:");
    alloc_peak = memory_stats(kCPU).peak_allocated;
  }
};

struct SaveAt : Callback {
  std::string stem;
  std::string state_key() const override { return "SaveAt"; }
  void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const Batch&, int64_t) override {
    if (t.global_step() == 1) t.save_checkpoint(stem);
  }
};

// The largest tensor (bytes) in a safetensors file, from its header.
int64_t largest_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8] = {};
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  const nlohmann::json header = nlohmann::json::parse(h);
  int64_t best = 0;
  for (const auto& [k, v] : header.items())
    if (k != "__metadata__")
      best = std::max(best, v.at("data_offsets").at(1).get<int64_t>() - v.at("data_offsets").at(0).get<int64_t>());
  return best;
}

TrainerOptions options(const std::string& strategy, const std::string& dir) {
  TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = "auto";
  o.strategy = strategy;
  if (strategy == "fsdp") o.fsdp_min_num_params = 1;  // every Linear is a unit
  o.max_steps = 1;
  o.max_epochs = -1;
  o.enable_progress_bar = o.enable_model_summary = o.enable_checkpointing = false;
  o.logger = false;
  o.num_sanity_val_steps = 0;
  o.limit_val_batches = 0;
  o.checkpoint_layout = CheckpointLayout::sharded;
  o.default_root_dir = dir;
  o.seed = 1;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_sharded_load: peak RSS per rank while loading a sharded checkpoint"};
  std::vector<std::string> strategies;
  std::string phase = "both", dir = (fs::temp_directory_path() / "volt_bench_sharded_load").string();
  int repeats = 3;
  app.add_option("--strategy", strategies, "zero1 | fsdp (repeatable; default both)");
  app.add_option("--phase", phase, "save | load | both")->check(CLI::IsMember({"save", "load", "both"}));
  app.add_option("--dir", dir, "where the checkpoints go (<dir>/<strategy>)");
  app.add_option("--width", g_width, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--layers", g_layers, "Linear(width, width) layers")->check(CLI::PositiveNumber);
  app.add_option("--out", g_out, "output width")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "loads per strategy (min/median/max)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (strategies.empty()) strategies = {"zero1", "fsdp"};
  for (const auto& s : strategies)
    if (s != "zero1" && s != "fsdp") {
      std::cerr << "bench_sharded_load: --strategy " << s << ": expected zero1 or fsdp\n";
      return 2;
    }
  const dist::LaunchEnv env = dist::detect_launch_env();
  const int world = env.world_size, rank = env.rank;
  if (world < 2) {
    std::cerr << "bench_sharded_load: run it under mpirun with 2 or more ranks (a sharded checkpoint needs them)\n";
    return 2;
  }
  const int64_t n = kBatch * world * 2;  // two batches per rank and epoch
  Tensor x = randn({n, g_width}), y = zeros({n, g_out});
  auto ds = std::make_shared<data::TensorDataset>(x, y);
  auto val = std::make_shared<ProbeDataset>(x.narrow(0, 0, kBatch * world), y.narrow(0, 0, kBatch * world));
  auto loader_opts = data::DataLoaderOptions{.batch_size = kBatch};
  bool all_pass = true;
  for (const auto& s : strategies) {
    const std::string stem = (fs::path(dir) / s).string();
    if (phase != "load") {
      if (rank == 0) fs::create_directories(dir);
      auto save = std::make_shared<SaveAt>();
      save->stem = stem;
      TrainerOptions o = options(s, dir);
      o.callbacks = {save};
      Trainer trainer(o);
      Wide model;
      trainer.fit(model, std::make_shared<data::DataLoader>(ds, loader_opts));
    }
    if (phase == "save") continue;
    int64_t params = 0;
    std::vector<int64_t> rss, alloc;
    std::vector<double> secs;
    for (int r = 0; r < repeats; ++r) {
      g_probe = Probe{};
      auto measure = std::make_shared<Measure>();
      TrainerOptions o = options(s, dir);
      o.callbacks = {measure};
      {
        Trainer trainer(o);
        Wide model;
        params = 0;
        for (auto& p : model.parameters()) params += p.numel();
        // Made before arming: a loader asks its dataset's size() when it is constructed.
        auto train_loader = std::make_shared<data::DataLoader>(ds, loader_opts);
        auto val_loader = std::make_shared<data::DataLoader>(val, loader_opts);
        g_probe.armed = true;
        trainer.fit(model, train_loader, val_loader, stem);
      }
      if (!g_probe.taken || measure->hwm <= 0) {
        std::cerr << "bench_sharded_load: rank " << rank << ": the measurement did not start before the restore\n";
        return 1;
      }
      rss.push_back(measure->hwm - g_probe.rss_before);
      alloc.push_back(measure->alloc_peak - g_probe.alloc_before);
      secs.push_back(measure->load_s);
    }
    std::sort(rss.begin(), rss.end());
    std::sort(secs.begin(), secs.end());
    const auto mid = (rss.size() - 1) / 2;
    const std::string shard = (fs::path(stem + ".shards") / ("rank-" + std::to_string(rank) + "-of-" +
                                                             std::to_string(world) + ".safetensors")).string();
    const int64_t shard_bytes = static_cast<int64_t>(fs::file_size(shard));
    const int64_t main_bytes = static_cast<int64_t>(fs::file_size(stem + ".safetensors"));
    const int64_t largest = std::max(largest_tensor(shard), largest_tensor(stem + ".safetensors"));
    const int64_t bound = shard_bytes + largest;
    const bool pass = rss.back() <= bound;
    all_pass = all_pass && pass;
    std::printf("{\"bench\":\"sharded_load\",\"strategy\":\"%s\",\"world_size\":%d,\"rank\":%d,\"params\":%lld,"
                "\"repeats\":%d,\"shard_bytes\":%lld,\"main_bytes\":%lld,\"largest_tensor_bytes\":%lld,"
                "\"bound_bytes\":%lld,\"rss_increase_bytes_min\":%lld,\"rss_increase_bytes_median\":%lld,"
                "\"rss_increase_bytes_max\":%lld,\"alloc_increase_bytes_max\":%lld,\"load_s_median\":%.3f,"
                "\"pass\":%s}\n",
                s.c_str(), world, rank, static_cast<long long>(params), repeats, static_cast<long long>(shard_bytes),
                static_cast<long long>(main_bytes), static_cast<long long>(largest), static_cast<long long>(bound),
                static_cast<long long>(rss.front()), static_cast<long long>(rss[mid]),
                static_cast<long long>(rss.back()), static_cast<long long>(*std::max_element(alloc.begin(), alloc.end())),
                secs[(secs.size() - 1) / 2], pass ? "true" : "false");
    std::fflush(stdout);
  }
  return all_pass ? 0 : 1;
}
