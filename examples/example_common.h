#pragma once
// Shared pieces of the MNIST examples: the command line (one spelling for every example), a throughput
// callback, and results.json.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/data/data_module.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/allocator.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/loggers/tensorboard_logger.h>
#include <volt/trainer/callbacks/throughput_monitor.h>
#include <volt/trainer/cli/config_file.h>
#include <volt/trainer/cli/option_table.h>
#include <volt/trainer/cli/trainer_flags.h>
#include <volt/trainer/strategies/registry.h>
#include <volt/trainer/trainer.h>

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
  std::string logger = "csv";  // csv | tensorboard | both | none
  std::string profiler;        // "" | simple | ops | advanced
  std::string profile_steps;   // "A:B"
  // Every other Trainer option (--max-steps, --limit-train-batches, --gradient-clip-val, ...; generated from the
  // option table, trainer/cli/option_table.h). The fields above win over their namesakes here.
  TrainerOptions trainer;
};

// The Trainer fields the examples have flags of their own for (with the Trainer's names as aliases).
inline const std::vector<std::string> kOwnTrainerFlags = {"accelerator", "devices",          "strategy",
                                                           "precision",   "max_epochs",       "enable_progress_bar",
                                                           "default_root_dir", "profiler",  "profile_steps", "seed"};

namespace detail {

// Validators that say what was wrong in words ("--batch-size: must be a positive integer, got '0'") instead of
// CLI11's numeric ranges. They run before CLI11 converts the text, so "abc" never reaches a conversion.
inline bool parse_integer(const std::string& s, long long& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size() && !std::isspace(static_cast<unsigned char>(s[0]));
}

inline CLI::Validator integer_in(long long lo, long long hi, const std::string& what) {
  return CLI::Validator(
      [lo, hi, what](std::string& s) -> std::string {
        long long v = 0;
        if (!parse_integer(s, v)) return "must be " + what + ", got '" + s + "' (not an integer)";
        if (v < lo || v > hi) return "must be " + what + ", got " + s;
        return "";
      },
      what);
}

inline CLI::Validator positive_real(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0])))
          return "must be " + what + ", got '" + s + "' (not a number)";
        if (!(v > 0) || !std::isfinite(v) || errno == ERANGE) return "must be " + what + ", got " + s;
        return "";
      },
      what);
}

inline CLI::Validator one_of(std::vector<std::string> allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return CLI::Validator(
      [allowed, list](std::string& s) -> std::string {
        for (const auto& a : allowed)
          if (s == a) return "";
        return "got '" + s + "'; expected one of " + list;
      },
      "one of " + list);
}

// --devices: "auto", "-1", a count or comma-separated ids; the Trainer checks them against the hardware.
inline CLI::Validator devices_spec() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s == "auto" || s == "-1") return "";
        bool ok = !s.empty();
        for (char c : s) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == ',' || c == ' ');
        if (!ok || s.find_first_of("0123456789") == std::string::npos)
          return "got '" + s + "'; expected auto, -1 (all GPUs), a count like 2 or GPU ids like 0,1";
        return "";
      },
      "auto | N | -1 | ids");
}

}  // namespace detail

// Parses the flags shared by all examples (and every Trainer option, and --config/--print-config). Returns false
// (after printing) when the program should exit with `exit_code` (0 for --help and --print-config, 2 for a bad
// flag or config file). Every value is validated here, before any work. `add_flags`, when given, adds an
// example's own flags (e.g. char_transformer's --text and --seq-len) to the same command line and config file.
inline bool parse_args(int argc, char** argv, const std::string& description, Args& a, int& exit_code,
                       const std::function<void(CLI::App&)>& add_flags = {}) {
  using namespace detail;
  constexpr long long kMax = INT64_MAX;
  CLI::App app{description};
  app.option_defaults()->always_capture_default();  // --print-config shows every default
  app.add_option("--data", a.data, "directory with the MNIST-format IDX files (plain or .gz)");
  app.add_option("--epochs,--max-epochs", a.epochs, "training epochs")->check(integer_in(1, kMax, "a positive integer"));
  app.add_option("--batch-size", a.batch_size, "batch size per process")->check(integer_in(1, kMax, "a positive integer"));
  app.add_option("--lr", a.lr, "learning rate")->check(positive_real("a positive finite number"));
  app.add_option("--seed", a.seed, "global seed (weights, split, shuffles)")
      ->check(integer_in(0, kMax, "a non-negative integer"));
  app.add_option("--accelerator", a.accelerator, "cpu | gpu | auto")->check(one_of({"cpu", "gpu", "cuda", "auto"}));
  app.add_option("--devices", a.devices, "auto | N | -1 | ids like '0,1'")->check(devices_spec());
  app.add_option("--strategy", a.strategy, cli::trainer_option("strategy").help)  // the registry's names
      ->check(one_of(volt::strategy_names()));
  app.add_option("--precision", a.precision, "32-true | 16-mixed | bf16-mixed | 16-true | bf16-true | 64-true")
      ->check(one_of({"32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "16-true", "bf16-true", "64-true",
                      "64"}));
  app.add_option("--num-workers", a.num_workers, "background batch-assembly threads")
      ->check(integer_in(0, 1024, "an integer from 0 to 1024"));
  app.add_option("--out,--default-root-dir", a.out, "run directory (logs, checkpoints, results.json)")
      ->check(CLI::Validator([](std::string& s) { return s.empty() ? std::string("must not be empty") : ""; }, ""));
  app.add_option("--resume", a.resume,
                 "checkpoint to resume from: a stem (path without .safetensors/.json), \"last\" or \"best\"");
  cli::add_bool_flag(app, "--enable-progress-bar,!--no-progress-bar", a.progress_bar,
                     "the progress bar (--no-progress-bar: off)");
  app.add_option("--logger", a.logger,
                 "csv (metrics.csv) | tensorboard (event files) | both | none, under <out>/lightning_logs/version_N")
      ->check(one_of({"csv", "tensorboard", "both", "none"}));
  app.add_option("--profiler", a.profiler,
                 "simple (time per hook and stage) | ops (per-op/kernel CSV + Chrome trace) | advanced (both); "
                 "reports under <out>/lightning_logs/version_N/profiler")
      ->check(one_of({"simple", "ops", "advanced"}));
  app.add_option("--profile-steps", a.profile_steps,
                 "A:B: cudaProfilerStart/Stop around optimizer steps A to B-1 (nsys --capture-range=cudaProfilerApi, "
                 "ncu --profile-from-start off); the ops profiler records only that window")
      ->check(CLI::Validator([](std::string& s) {
        try {
          parse_profile_steps(s);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }, "A:B"));
  cli::add_trainer_flags(app, a.trainer, kOwnTrainerFlags);
  if (add_flags) add_flags(app);
  cli::add_config_flags(app);
  try {
    cli::check_config_file(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e);
    return false;
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    exit_code = 2;
    return false;
  }
  if (cli::print_config_requested(app)) {
    std::cout << cli::config_yaml(app);
    exit_code = 0;
    return false;
  }
  return true;
}

// --logger as Trainer options: the loggers write under <out>/lightning_logs/version_N (with "both", the two
// share that directory: the Trainer settles their versions before either writes). Loggers are built on every
// rank and used on rank 0 only; they touch no file before that.
inline void apply_logger_flag(const Args& a, TrainerOptions& o) {
  o.logger = a.logger != "none";
  o.loggers.clear();
  if (a.logger == "csv" || a.logger == "both")  // metrics.csv rewritten whenever step rows are due
    o.loggers.push_back(std::make_shared<CSVLogger>(
        a.out, CSVLoggerOptions{.flush_logs_every_n_steps = o.log_every_n_steps}));
  if (a.logger == "tensorboard" || a.logger == "both")
    o.loggers.push_back(std::make_shared<TensorBoardLogger>(a.out));
}

// The Trainer options of an example run: the command line's Trainer flags, the example's own flags over their
// namesakes, the throughput callback and the --logger choice.
inline TrainerOptions trainer_options(const Args& args, std::shared_ptr<ThroughputMonitor> throughput) {
  TrainerOptions options = args.trainer;
  options.accelerator = args.accelerator;
  options.devices = args.devices;
  options.strategy = args.strategy;
  options.precision = args.precision;
  options.max_epochs = args.epochs;
  options.enable_progress_bar = args.progress_bar;
  options.default_root_dir = args.out;
  options.callbacks.push_back(std::move(throughput));
  options.profiler = args.profiler;
  options.profile_steps = args.profile_steps;
  apply_logger_flag(args, options);
  return options;
}

// Creates the run directory and checks that it is writable, so a bad --out fails before any data is loaded or
// any training is done.
inline void prepare_output_dir(const std::string& dir) { ensure_writable_dir(dir, "--out"); }

inline int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// Writes <out>/results.json (atomically) with the test metrics, throughput and memory figures.
// `interrupted`: fit stopped on SIGINT/SIGTERM (no test metrics then).
inline void write_results(const std::string& out_dir, const std::string& example, const MetricMap& test_metrics,
                          const volt::ThroughputMonitor& tp, Device device, const Args& a, bool interrupted) {
  nlohmann::json j;
  j["example"] = example;
  j["interrupted"] = interrupted;
  for (const auto& [k, v] : test_metrics) j[k] = v;
  // Totals of the whole run: the ThroughputMonitor's state is checkpointed, so a resumed run includes the
  // part before the resume.
  j["train_samples_per_second"] = tp.samples_per_second();
  j["train_samples"] = tp.samples();
  j["train_seconds"] = tp.seconds();
  if (tp.tokens() > 0) {  // a ThroughputMonitor with a length_fn (examples/gpt2)
    j["train_tokens"] = tp.tokens();
    j["train_tokens_per_second"] = tp.tokens_per_second();
  }
  j["device"] = device.str();
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["peak_tensor_bytes"] = memory_stats(device).peak_allocated;
  j["epochs"] = a.epochs;
  j["batch_size"] = a.batch_size;
  j["lr"] = a.lr;
  j["seed"] = a.seed;
  j["precision"] = precision_name(parse_precision(a.precision));  // canonical spelling
  j["resumed_from"] = a.resume;
  nn::save_json_atomic(out_dir + "/results.json", j);
}

// The whole program of an example: parse flags, seed, build the model (make_model(lr)) and the MNIST data
// module, fit (resuming if asked), test, write results.json on rank 0. Returns the process exit code: 0, 1 on
// an error, 128 + the signal (130 SIGINT, 143 SIGTERM, as shells report) when fit was interrupted; the run
// then resumes with --resume last.
template <class MakeModel>
int run_example(int argc, char** argv, const std::string& name, const std::string& description, Args args,
                bool shuffle_train, MakeModel make_model) {
  int code = 0;
  if (!parse_args(argc, argv, description, args, code)) return code;
  try {
    // Everything that can be checked without data comes first: the output directory, the device, strategy and
    // precision (the Trainer's constructor), and the checkpoint to resume from.
    prepare_output_dir(args.out);
    auto throughput = std::make_shared<ThroughputMonitor>();
    Trainer trainer(trainer_options(args, throughput));
    // ("last" and "best" are looked up by fit, which names what it searched when nothing is found.)
    if (!args.resume.empty() && args.resume != "last" && args.resume != "best")
      VOLT_CHECK(std::filesystem::exists(args.resume + ".json") || std::filesystem::exists(args.resume),
                 "--resume '", args.resume, "': no such checkpoint (expected ", args.resume, ".json and ", args.resume,
                 ".safetensors)");
    seed_everything(args.seed);
    auto model = make_model(args.lr);
    data::MnistDataModule dm(args.data, args.batch_size, args.num_workers, args.seed, /*pin_memory=*/true,
                             shuffle_train);
    trainer.fit(*model, dm, args.resume);
    if (trainer.interrupted()) {
      if (trainer.strategy().is_global_zero()) {
        write_results(args.out, name, {}, *throughput, model->device(), args, /*interrupted=*/true);
        std::cerr << name << ": interrupted by signal " << trainer.interrupt_signal()
                  << "; checkpoint saved, continue with --resume last\n";
      }
      return 128 + trainer.interrupt_signal();
    }
    auto results = trainer.test(*model, dm);
    if (trainer.strategy().is_global_zero()) {
      write_results(args.out, name, results.empty() ? MetricMap{} : results[0], *throughput, model->device(), args,
                    /*interrupted=*/false);
      std::cout << "results written to " << args.out << "/results.json (train "
                << static_cast<int64_t>(throughput->samples_per_second()) << " samples/s)\n";
    }
  } catch (const std::exception& e) {  // volt::Error, and e.g. std::filesystem or std::bad_alloc: a message
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace volt::examples
