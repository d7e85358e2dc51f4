// The training stall per checkpoint, synchronous against asynchronous (trainer/callbacks/async_checkpointing.h),
// for a ~124M-parameter model trained with Adam: the checkpoint holds the parameters and both moments (~1.5 GB
// in f32). A callback saves every --every optimizer steps through Trainer::save_checkpoint (the path
// ModelCheckpoint takes) and times the call: that is how long training stood still. Asynchronous mode adds
// AsyncCheckpointing, so the call copies the state to host memory and returns; the write goes on in the
// background (its duration is reported as write_s). Also reported: the median step without a save.
//
//   bench_checkpoint_stall [--mode sync|async|both] [--saves N] [--every K] [--dir D] [--accelerator cpu|cuda]
//
// Prints one JSON object per mode, with the stall's min/median/max over the N saves (seconds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include <volt/data/data.h>
#include <volt/nn/nn.h>
#include <volt/trainer/callbacks/async_checkpointing.h>
#include <volt/trainer/trainer.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kWidth = 3072, kLayers = 13, kOut = 512, kBatch = 4;

// 13 x Linear(3072, 3072) + Linear(3072, 512): 124,296,704 parameters (GPT-2 small has 124.4M).
struct Wide : TrainModule {
  std::vector<std::unique_ptr<nn::Linear>> layers;
  Wide() {
    for (int64_t i = 0; i < kLayers; ++i) {
      layers.push_back(std::make_unique<nn::Linear>(kWidth, kWidth));
      register_module("fc" + std::to_string(i), *layers.back());
    }
    layers.push_back(std::make_unique<nn::Linear>(kWidth, kOut));
    register_module("head", *layers.back());
  }
  std::string type_name() const override { return "Wide124M"; }
  Tensor training_step(const Batch& batch, int64_t) override {
    Tensor h = batch.input;
    for (size_t i = 0; i + 1 < layers.size(); ++i) h = relu(layers[i]->forward(h));
    return mse_loss(layers.back()->forward(h), batch.target);
  }
  Optimizers configure_optimizers() override {
    return std::make_shared<optim::Adam>(parameters(), optim::AdamOptions{.lr = 1e-5});
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Timer : Callback {
  std::string stem;
  int64_t every = 4;
  std::shared_ptr<AsyncCheckpointing> async;
  std::vector<double> stalls, writes, steps;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  bool saved_last = false;
  int64_t writes_seen = 0;
  std::string state_key() const override { return "Timer"; }
  // The background writes finished since the last look, with their durations.
  void note_writes() {
    if (async && async->writes_done() > writes_seen) {
      writes_seen = async->writes_done();
      writes.push_back(async->last_write_seconds());
    }
  }
  void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const Batch&, int64_t) override {
    const auto now = std::chrono::steady_clock::now();
    if (!saved_last && t.global_step() > 1) steps.push_back(std::chrono::duration<double>(now - last).count());
    saved_last = false;
    note_writes();
    if (t.global_step() % every == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      t.save_checkpoint(stem);
      stalls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!async) writes.push_back(stalls.back());
      saved_last = true;
    }
    last = std::chrono::steady_clock::now();
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "both", dir = (fs::temp_directory_path() / "volt_bench_checkpoint_stall").string(),
              accelerator = "cpu";
  int64_t saves = 5, every = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--mode") mode = v;
    else if (f == "--saves") saves = std::atoll(v.c_str());
    else if (f == "--every") every = std::atoll(v.c_str());
    else if (f == "--dir") dir = v;
    else if (f == "--accelerator") accelerator = v;
    else {
      std::cerr << "bench_checkpoint_stall: unknown flag " << f << "\n";
      return 2;
    }
  }
  if ((mode != "sync" && mode != "async" && mode != "both") || saves < 1 || every < 1) {
    std::cerr << "bench_checkpoint_stall: expected --mode sync|async|both, --saves >= 1, --every >= 1\n";
    return 2;
  }
  const int64_t n = kBatch * every * saves + kBatch;  // one epoch: saves x every steps, and one more
  auto ds = std::make_shared<data::TensorDataset>(randn({n, kWidth}), zeros({n, kOut}));
  for (const std::string m : {std::string("sync"), std::string("async")}) {
    if (mode != "both" && mode != m) continue;
    fs::remove_all(dir);
    fs::create_directories(dir);
    Wide model;
    int64_t params = 0;
    for (auto& p : model.parameters()) params += p.numel();
    auto timer = std::make_shared<Timer>();
    timer->stem = (fs::path(dir) / "bench").string();
    timer->every = every;
    std::vector<std::shared_ptr<Callback>> cbs;
    if (m == "async") cbs.push_back(timer->async = std::make_shared<AsyncCheckpointing>());
    cbs.push_back(timer);
    Trainer trainer({.accelerator = accelerator, .devices = "1", .max_epochs = 1, .enable_progress_bar = false,
                     .enable_model_summary = false, .enable_checkpointing = false, .default_root_dir = dir,
                     .logger = false, .callbacks = cbs, .seed = 1});
    const auto t0 = std::chrono::steady_clock::now();
    trainer.fit(model, std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = kBatch}));
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    timer->note_writes();  // fit waited for the last one
    const auto bytes = fs::file_size(timer->stem + ".safetensors");
    auto& s = timer->stalls;
    std::printf("{\"bench\": \"checkpoint_stall\", \"mode\": \"%s\", \"accelerator\": \"%s\", \"params\": %lld, "
                "\"checkpoint_bytes\": %llu, \"saves\": %zu, \"every_steps\": %lld, \"stall_s_min\": %.3f, "
                "\"stall_s_median\": %.3f, \"stall_s_max\": %.3f, \"write_s_median\": %.3f, "
                "\"step_s_median\": %.3f, \"fit_s\": %.1f}\n",
                m.c_str(), accelerator.c_str(), static_cast<long long>(params), static_cast<unsigned long long>(bytes),
                s.size(), static_cast<long long>(every), *std::min_element(s.begin(), s.end()), median(s),
                *std::max_element(s.begin(), s.end()), median(timer->writes), timer->writes.size(),
                median(timer->steps), total);
    std::fflush(stdout);
  }
  fs::remove_all(dir);
  return 0;
}
