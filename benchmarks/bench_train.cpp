// bench_train: trains the MNIST MLP recipe (784-128-10, Adam) through the real Trainer and DataLoader and prints
// one JSON object per configuration:
//   {"bench":"train","model":"mlp","batch_size":16,"threads":1,"steps":3000,"world_size":1,
//    "train_samples_per_s":..., "eval_samples_per_s":..., "peak_rss_mb":..., "peak_tensor_mb":...}
// Flags: --batch-size (repeatable: several configurations), --steps, --threads, --data, --strategy, --precision.
// Under `mpirun -np N ... --strategy ddp`, rank 0 prints the global figure (samples of all ranks per second).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "data/data_module.h"
#include "examples/example_common.h"
#include "examples/mnist_models.h"
#include "kernels/threads.h"
#include "trainer/trainer.h"

using namespace volt;

int main(int argc, char** argv) {
  std::vector<int64_t> batch_sizes{16, 256};
  int64_t steps = 2000;
  int threads = 1;
  std::string data = "/usr/share/datasets/fashion-mnist", strategy = "auto", precision = "32-true",
              devices = "auto", accelerator = "cpu";
  CLI::App app{"Volt training throughput benchmark (MNIST MLP recipe)"};
  app.add_option("--batch-size", batch_sizes, "batch sizes to run (one JSON line each)");
  app.add_option("--steps", steps, "optimizer steps per configuration")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads per process")->check(CLI::PositiveNumber);
  app.add_option("--data", data, "MNIST-format IDX directory");
  app.add_option("--strategy", strategy, "auto | ddp (launch under mpirun)");
  app.add_option("--precision", precision, "32-true | 16-mixed | bf16-mixed");
  app.add_option("--accelerator", accelerator, "cpu | gpu | auto");
  app.add_option("--devices", devices, "devices per node");
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(threads);
    for (int64_t bs : batch_sizes) {
      seed_everything(1);
      examples::MnistMlp model(1e-4);
      data::MnistDataModule dm(data, bs, 0, 1, /*pin_memory=*/true, /*shuffle_train=*/false);
      auto tp = std::make_shared<ThroughputMonitor>();
      Trainer trainer({.accelerator = accelerator, .devices = devices, .strategy = strategy, .precision = precision,
                       .max_steps = steps, .limit_val_batches = 0, .num_sanity_val_steps = 0,
                       .enable_progress_bar = false, .enable_model_summary = false,
                       .enable_checkpointing = false, .logger = false, .callbacks = {tp}});
      reset_peak_memory_stats(model.device());
      trainer.fit(model, dm);
      // Evaluation throughput: a full pass over the validation split (5,000 images) by a second Trainer.
      Trainer evaluator({.accelerator = accelerator, .devices = devices, .strategy = strategy,
                         .precision = precision, .enable_progress_bar = false, .enable_model_summary = false,
                         .enable_checkpointing = false, .logger = false});
      auto val = dm.val_dataloader();
      auto t0 = std::chrono::steady_clock::now();
      evaluator.validate(model, val);
      double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int world = trainer.strategy().world_size();
      // Every rank trains the same number of samples in lockstep: the global rate is world x the local one.
      double train_sps = tp->samples_per_second() * world;
      double eval_sps = static_cast<double>(val->dataset()->size()) / eval_s;
      if (trainer.strategy().is_global_zero()) {
        std::printf(
            "{\"bench\":\"train\",\"model\":\"mlp\",\"batch_size\":%lld,\"threads\":%d,\"steps\":%lld,"
            "\"world_size\":%d,\"strategy\":\"%s\",\"precision\":\"%s\",\"train_samples_per_s\":%.1f,"
            "\"eval_samples_per_s\":%.1f,\"peak_rss_mb\":%.1f,\"peak_tensor_mb\":%.2f}\n",
            static_cast<long long>(bs), threads, static_cast<long long>(steps), world, strategy.c_str(),
            precision.c_str(), train_sps, eval_sps, examples::peak_rss_bytes() / 1e6,
            memory_stats(model.device()).peak_allocated / 1e6);
        std::fflush(stdout);
      }
    }
  } catch (const Error& e) {
    std::cerr << "bench_train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
