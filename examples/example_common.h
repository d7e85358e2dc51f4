#pragma once
// Shared pieces of the MNIST examples: the command line (one spelling for every example), a throughput
// callback, and results.json.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/data_module.h"
#include "nn/serialization.h"
#include "runtime/allocator.h"
#include "trainer/throughput_monitor.h"
#include "trainer/trainer.h"

namespace volt::examples {

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 1;
  int64_t batch_size = 16;
  double lr = 1e-4;
  uint64_t seed = 1;
  std::string accelerator = "auto";
  std::string devices = "auto";
  std::string strategy = "auto";
  std::string precision = "32-true";
  int num_workers = 0;
  std::string out = "runs/mnist";
  std::string resume;
  bool progress_bar = true;
};

// Parses the flags shared by all examples. Returns false (after printing) when the program should exit with
// `exit_code` (--help or a bad flag).
inline bool parse_args(int argc, char** argv, const std::string& description, Args& a, int& exit_code) {
  CLI::App app{description};
  app.add_option("--data", a.data, "directory with the MNIST-format IDX files (plain or .gz)");
  app.add_option("--epochs", a.epochs, "training epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", a.batch_size, "batch size per process")->check(CLI::PositiveNumber);
  // PositiveNumber alone lets "nan" through (NaN <= 0 is false).
  const CLI::Validator finite(
      [](std::string& s) {
        return std::isfinite(std::strtod(s.c_str(), nullptr)) ? std::string() : "Value " + s + " is not a finite number";
      },
      "FINITE");
  app.add_option("--lr", a.lr, "learning rate")->check(CLI::PositiveNumber & finite);
  app.add_option("--seed", a.seed, "global seed (weights, split, shuffles)");
  app.add_option("--accelerator", a.accelerator, "cpu | gpu | auto");
  app.add_option("--devices", a.devices, "auto | N | -1 | ids like '0,1'");
  app.add_option("--strategy", a.strategy, "auto | single_device | ddp | ddp_spawn");
  app.add_option("--precision", a.precision, "32-true | 16-mixed | bf16-mixed");
  app.add_option("--num-workers", a.num_workers, "background batch-assembly threads")->check(CLI::NonNegativeNumber);
  app.add_option("--out", a.out, "run directory (logs, checkpoints, results.json)");
  app.add_option("--resume", a.resume, "checkpoint stem to resume from (path without .safetensors/.json)");
  app.add_flag("!--no-progress-bar", a.progress_bar, "disable the progress bar");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e);
    return false;
  }
  return true;
}

inline int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// Writes <out>/results.json (atomically) with the test metrics, throughput and memory figures.
inline void write_results(const std::string& out_dir, const std::string& example, const MetricMap& test_metrics,
                          const volt::ThroughputMonitor& tp, Device device, const Args& a) {
  nlohmann::json j;
  j["example"] = example;
  for (const auto& [k, v] : test_metrics) j[k] = v;
  j["train_samples_per_second"] = tp.samples_per_second();
  j["train_samples"] = tp.samples();
  j["train_seconds"] = tp.seconds();
  j["device"] = device.str();
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["peak_tensor_bytes"] = memory_stats(device).peak_allocated;
  j["epochs"] = a.epochs;
  j["batch_size"] = a.batch_size;
  j["lr"] = a.lr;
  j["seed"] = a.seed;
  j["precision"] = a.precision;
  nn::save_json_atomic(out_dir + "/results.json", j);
}

// The whole program of an example: parse flags, seed, build the model (make_model(lr)) and the MNIST data
// module, fit (resuming if asked), test, write results.json on rank 0. Returns the process exit code.
template <class MakeModel>
int run_example(int argc, char** argv, const std::string& name, const std::string& description, Args args,
                bool shuffle_train, MakeModel make_model) {
  int code = 0;
  if (!parse_args(argc, argv, description, args, code)) return code;
  try {
    seed_everything(args.seed);
    auto model = make_model(args.lr);
    data::MnistDataModule dm(args.data, args.batch_size, args.num_workers, args.seed, /*pin_memory=*/true,
                             shuffle_train);
    auto throughput = std::make_shared<ThroughputMonitor>();
    Trainer trainer({.accelerator = args.accelerator, .devices = args.devices, .strategy = args.strategy,
                     .precision = args.precision, .max_epochs = args.epochs,
                     .enable_progress_bar = args.progress_bar, .default_root_dir = args.out,
                     .callbacks = {throughput}});
    trainer.fit(*model, dm, args.resume);
    auto results = trainer.test(*model, dm);
    if (trainer.strategy().is_global_zero()) {
      write_results(args.out, name, results.empty() ? MetricMap{} : results[0], *throughput, model->device(), args);
      std::cout << "results written to " << args.out << "/results.json (train "
                << static_cast<int64_t>(throughput->samples_per_second()) << " samples/s)\n";
    }
  } catch (const Error& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace volt::examples
