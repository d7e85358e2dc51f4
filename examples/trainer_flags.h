#pragma once
// Every TrainerOptions field as a command-line flag, and YAML/JSON config files, for programs built on CLI11
// (the examples use it; so can a user's own training program):
//
//   CLI::App app{"my trainer"};
//   volt::TrainerOptions opt;
//   volt::cli::add_trainer_flags(app, opt);   // --max-steps, --limit-train-batches, --gradient-clip-val, ...
//   volt::cli::add_config_flags(app);         // --config FILE (YAML or JSON), --print-config
//   volt::cli::check_config_file(app, argc, argv);  // unknown keys in the file: an error naming them
//   app.parse(argc, argv);
//   if (volt::cli::print_config_requested(app)) { std::cout << volt::cli::config_yaml(app); return 0; }
//
// Flags are the option names with dashes (`max_steps` -> `--max-steps`). A config file holds the same names as
// keys, with underscores or dashes, at the top level or under a `trainer:` section (the layout of upstream's
// CLI config files); a sequence gives a multi-valued flag. Flags on the command line override the file.
// `--print-config` prints the effective configuration (every flag with its value or default) as YAML that
// `--config` reads back. Unknown keys, nested sections other than `trainer:`, and values a flag refuses are
// errors naming the file, the key and the problem.
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <istream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <volt/runtime/error.h>
#include <volt/runtime/log.h>
#include <volt/trainer/profilers/profiler.h>
#include <volt/trainer/strategies/registry.h>
#include <volt/trainer/trainer_options.h>

namespace volt::cli {

// "10" -> 10 batches; "0.25" / "1.0" / "1e-1" -> a fraction of the epoch. `flag` names the option in errors.
inline BatchAmount parse_batch_amount(const std::string& s, const std::string& flag) {
  const std::string prefix = flag.empty() ? "" : flag + ": ";
  const bool fraction = s.find_first_of(".eE") != std::string::npos;
  char* end = nullptr;
  if (fraction) {
    const double v = std::strtod(s.c_str(), &end);
    VOLT_CHECK(!s.empty() && end == s.c_str() + s.size() && std::isfinite(v) && v >= 0 && v <= 1, prefix,
               "expected a batch count (e.g. 10) or a fraction of the epoch in [0, 1] (e.g. 0.25), got '", s, "'");
    return BatchAmount(v);
  }
  const long long v = std::strtoll(s.c_str(), &end, 10);
  VOLT_CHECK(!s.empty() && end == s.c_str() + s.size() && v >= 0 && !std::isspace(static_cast<unsigned char>(s[0])),
             prefix, "expected a batch count (e.g. 10) or a fraction of the epoch in [0, 1] (e.g. 0.25), got '", s,
             "'");
  return BatchAmount(static_cast<int64_t>(v));
}

namespace detail {

// A CLI11 check that runs `parse` and reports its volt::Error text.
template <class Parse>
CLI::Validator checked_by(Parse parse, std::string description) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      std::move(description));
}

inline CLI::Validator at_least(long long lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || end != s.c_str() + s.size()) return "expected an integer, got '" + s + "'";
        if (v < lo) return "must be >= " + std::to_string(lo) + ", got " + s;
        return "";
      },
      ">= " + std::to_string(lo));
}

inline CLI::Validator non_negative_real() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return "expected a number, got '" + s + "'";
        if (!std::isfinite(v) || v < 0) return "must be a finite number >= 0, got " + s;
        return "";
      },
      ">= 0");
}

inline CLI::Validator choice(const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return CLI::Validator(
      [allowed, list](std::string& s) -> std::string {
        for (const auto& a : allowed)
          if (s == a) return "";
        return "got '" + s + "'; expected one of " + list;
      },
      list);
}

inline std::string batch_amount_str(const BatchAmount& b) {
  if (!b.is_fraction) return std::to_string(b.count);
  std::ostringstream os;
  os << b.fraction;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // keep it a fraction when read back
  return s;
}

inline void add_batch_amount(CLI::App& app, const std::string& flag, BatchAmount& target, const std::string& help) {
  app.add_option_function<std::string>(
         flag, [&target, flag](const std::string& s) { target = parse_batch_amount(s, flag); }, help)
      ->check(checked_by([](const std::string& s) { parse_batch_amount(s, ""); }, "COUNT|FRACTION"))
      ->default_str(batch_amount_str(target));
}

// Option names as config keys: "max_steps" and "max-steps" both reach --max-steps.
inline std::string flag_name(std::string key) {
  for (char& c : key)
    if (c == '_') c = '-';
  return key;
}

inline std::string scalar_text(const YAML::Node& n) { return n.IsNull() ? std::string() : n.Scalar(); }

}  // namespace detail

// A boolean flag ("--x,!--no-x") whose default --print-config shows; "--x=false" and config values work too.
inline CLI::Option* add_bool_flag(CLI::App& app, const std::string& names, bool& target, const std::string& help) {
  return app.add_flag(names, target, help)->default_str(target ? "true" : "false");
}

// A boolean flag for a std::optional<bool>: absent leaves it unset (--print-config writes null, which reads back
// as unset); "--x", "--x=true" or a config value true sets true, "--no-x" or false sets false.
inline CLI::Option* add_optional_bool_flag(CLI::App& app, const std::string& names, std::optional<bool>& target,
                                           const std::string& help) {
  // The check runs before the callback and turns a value that is no boolean into a parse error (the flag
  // callback's own conversion would throw std::invalid_argument out of parse).
  const CLI::Validator boolean(
      [](std::string& s) -> std::string {
        try {
          CLI::detail::to_flag_value(s);
        } catch (const std::exception&) {
          return "expected true or false, got '" + s + "'";
        }
        return "";
      },
      "BOOL");
  return app.add_flag_function(names, [&target](int64_t count) { target = count > 0; }, help)
      ->check(boolean)
      ->default_str(target ? (*target ? "true" : "false") : "")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// Registers a flag for every TrainerOptions field that has a command-line form (not callbacks or loggers, which
// are objects; not the fields `skip` names, which the program has its own flags for, e.g. {"max_epochs",
// "default_root_dir"}). Values are validated as they are parsed, with messages naming the flag.
inline void add_trainer_flags(CLI::App& app, TrainerOptions& o, const std::vector<std::string>& skip = {}) {
  using namespace detail;
  auto want = [&](const char* field) {
    for (const auto& s : skip)
      if (s == field) return false;
    return true;
  };
  const std::string g = "Trainer";
  auto group = [&](CLI::Option* opt) { opt->group(g); };
  if (want("accelerator"))
    group(app.add_option("--accelerator", o.accelerator, "cpu | gpu | auto")->check(choice({"cpu", "gpu", "cuda", "auto"})));
  if (want("devices")) group(app.add_option("--devices", o.devices, "auto | N | -1 | ids like '0,1'"));
  if (want("auto_select_gpus"))
    group(add_bool_flag(app, "--auto-select-gpus", o.auto_select_gpus, "with --devices N: N GPUs no other process uses"));
  if (want("strategy"))
    group(app.add_option("--strategy", o.strategy, "auto | single_device | ddp | ddp_spawn | zero1 | zero2 | ddp_sharded | deepspeed_stage_1 | deepspeed_stage_2 | fsdp | fsdp_full_shard | deepspeed_stage_3 | dp | ddp2")
              ->check(choice(volt::strategy_names())));
  if (want("fsdp_min_num_params"))
    group(app.add_option("--fsdp-min-num-params", o.fsdp_min_num_params,
                         "fsdp: a submodule with at least this many parameters (not yet wrapped) becomes a unit; 0: off")
              ->check(at_least(0)));
  if (want("fsdp_wrap"))
    group(app.add_option_function<std::string>(
                 "--fsdp-wrap",
                 [&o](const std::string& names) {
                   o.fsdp_wrap.clear();
                   std::string::size_type start = 0;
                   while (start <= names.size()) {
                     const auto comma = std::min(names.find(',', start), names.size());
                     if (comma > start) o.fsdp_wrap.push_back(names.substr(start, comma - start));
                     start = comma + 1;
                   }
                 },
                 "fsdp: comma-separated dotted module names that become units ('encoder,decoder.l1')")
              ->default_str(""));
  if (want("dp_replicas"))
    group(add_bool_flag(app, "--dp-replicas", o.dp_replicas,
                        "dp/ddp2 on CPU devices: a module replica per device (TrainModule::make_replica), as on GPUs"));
  if (want("num_nodes"))
    group(app.add_option("--num-nodes", o.num_nodes, "machines in a ddp job: world size = num_nodes x devices")
              ->check(at_least(1)));
  if (want("precision"))
    group(app.add_option("--precision", o.precision, "32-true | 16-mixed | bf16-mixed | 16-true | bf16-true | 64-true")
              ->check(checked_by([](const std::string& s) { parse_precision(s); }, "PRECISION")));
  group(app.add_option("--grad-scaler-init-scale", o.grad_scaler.init_scale, "16-mixed: initial loss scale")
            ->check(non_negative_real()));
  group(app.add_option("--grad-scaler-growth-factor", o.grad_scaler.growth_factor, "16-mixed: scale growth factor")
            ->check(non_negative_real()));
  group(app.add_option("--grad-scaler-backoff-factor", o.grad_scaler.backoff_factor, "16-mixed: scale backoff factor")
            ->check(non_negative_real()));
  group(app.add_option("--grad-scaler-growth-interval", o.grad_scaler.growth_interval,
                       "16-mixed: clean steps before the scale grows")
            ->check(at_least(1)));
  if (want("max_epochs"))
    group(app.add_option("--max-epochs", o.max_epochs, "-1: 1000 unless --max-steps is set")->check(at_least(-1)));
  group(app.add_option("--min-epochs", o.min_epochs, "epochs before early stopping may stop")->check(at_least(0)));
  group(app.add_option("--max-steps", o.max_steps, "optimizer steps; -1 = no limit")->check(at_least(-1)));
  group(app.add_option("--min-steps", o.min_steps, "steps before early stopping may stop")->check(at_least(0)));
  group(app.add_option("--max-time", o.max_time, "DD:HH:MM:SS or seconds; stop after this long")
            ->check(checked_by([](const std::string& s) { parse_max_time(s); }, "TIME")));
  add_batch_amount(app, "--val-check-interval", o.val_check_interval,
                   "validate every N training batches, or every fraction of the epoch");
  app.get_option("--val-check-interval")->group(g);
  group(app.add_option("--check-val-every-n-epoch", o.check_val_every_n_epoch, "validate every N epochs")
            ->check(at_least(1)));
  for (auto [flag, target, help] :
       {std::tuple<const char*, BatchAmount*, const char*>{"--limit-train-batches", &o.limit_train_batches,
                                                           "training batches per epoch: a count or a fraction"},
        {"--limit-val-batches", &o.limit_val_batches, "validation batches: a count or a fraction"},
        {"--limit-test-batches", &o.limit_test_batches, "test batches: a count or a fraction"},
        {"--limit-predict-batches", &o.limit_predict_batches, "predict batches: a count or a fraction"}}) {
    add_batch_amount(app, flag, *target, help);
    app.get_option(flag)->group(g);
  }
  group(app.add_option("--num-sanity-val-steps", o.num_sanity_val_steps, "validation batches before fit; -1 = all")
            ->check(at_least(-1)));
  group(app.add_option("--accumulate-grad-batches", o.accumulate_grad_batches, "batches per optimizer step")
            ->check(at_least(1)));
  group(app.add_option("--gradient-clip-val", o.gradient_clip_val, "clip gradients at this norm/value; 0 = off")
            ->check(non_negative_real()));
  group(app.add_option_function<std::string>(
                "--gradient-clip-algorithm",
                [&o](const std::string& s) { o.gradient_clip_algorithm = parse_gradient_clip_algorithm(s); },
                "norm | value")
            ->check(choice({"norm", "value"}))
            ->default_str(std::string(name(o.gradient_clip_algorithm))));
  group(app.add_option_function<std::string>(
                "--checkpoint-layout",
                [&o](const std::string& s) { o.checkpoint_layout = parse_checkpoint_layout(s); },
                "full | sharded: zero1/zero2 checkpoints gathered by rank 0, or one shard file per rank")
            ->check(choice({"full", "sharded"}))
            ->default_str(std::string(name(o.checkpoint_layout))));
  group(add_bool_flag(app, "--deterministic", o.deterministic, "deterministic algorithms (no TF32)"));
  if (want("benchmark"))
    group(add_optional_bool_flag(app, "--benchmark,!--no-benchmark", o.benchmark,
                                 "cuDNN convolution algorithms by timed trials (true) or heuristics (false); unset: "
                                 "as the process has it (false under --deterministic)"));
  group(add_bool_flag(app, "--detect-anomaly", o.detect_anomaly, "find the first op producing NaN/Inf (slow)"));
  group(app.add_option_function<std::string>(
                "--on-nonfinite-loss",
                [&o](const std::string& s) {
                  o.on_nonfinite_loss = s == "skip" ? NonFiniteLoss::skip
                                        : s == "stop" ? NonFiniteLoss::stop
                                                      : NonFiniteLoss::ignore;
                },
                "ignore | skip | stop: a step whose loss is NaN/Inf")
            ->check(choice({"ignore", "skip", "stop"}))
            ->default_str(o.on_nonfinite_loss == NonFiniteLoss::skip   ? "skip"
                          : o.on_nonfinite_loss == NonFiniteLoss::stop ? "stop"
                                                                       : "ignore"));
  group(app.add_option_function<std::string>(
                "--cuda-graphs",
                [&o](const std::string& s) {
                  o.cuda_graphs = s == "on" ? CudaGraphs::on : s == "off" ? CudaGraphs::off : CudaGraphs::automatic;
                },
                "auto | on | off: capture the training step as a graph and replay it (auto: on a GPU, for a module "
                "that declares a static step)")
            ->check(choice({"auto", "on", "off"}))
            ->default_str(o.cuda_graphs == CudaGraphs::on    ? "on"
                          : o.cuda_graphs == CudaGraphs::off ? "off"
                                                             : "auto"));
  if (want("enable_progress_bar"))
    group(add_bool_flag(app, "--enable-progress-bar,!--no-progress-bar", o.enable_progress_bar, "the progress bar"));
  group(add_bool_flag(app, "--enable-model-summary,!--no-model-summary", o.enable_model_summary,
                     "print the model summary before fit"));
  group(add_bool_flag(app, "--enable-checkpointing,!--no-checkpointing", o.enable_checkpointing,
                     "a default ModelCheckpoint (last epoch)"));
  if (want("default_root_dir"))
    group(app.add_option("--default-root-dir", o.default_root_dir, "where logs and checkpoints go"));
  group(app.add_option("--log-every-n-steps", o.log_every_n_steps, "step rows to the loggers every N steps")
            ->check(at_least(1)));
  group(app.add_option("--log-level", o.log_level, "trace | debug | info | warn | error | off: Volt's messages on "
                       "stderr (default: VOLT_LOG_LEVEL, else info)")
            ->check(checked_by([](const std::string& s) { logging::parse_level(s); }, "LEVEL")));
  if (want("profiler"))
    group(app.add_option("--profiler", o.profiler, "simple | ops | advanced")
              ->check(checked_by([](const std::string& s) { parse_profiler(s); }, "PROFILER")));
  group(app.add_option("--profiler-dir", o.profiler_dir, "profiler reports (default <log_dir>/profiler)"));
  group(app.add_option("--fast-dev-run", o.fast_dev_run,
                       "N: run N batches of every loop, log and save nothing (a smoke test); 0 = off")
            ->check(at_least(0)));
  add_batch_amount(app, "--overfit-batches", o.overfit_batches,
                   "train and validate on the same first batches (count or fraction), no shuffling; 0 = off");
  app.get_option("--overfit-batches")->group(g);
  group(add_bool_flag(app, "--sync-batchnorm", o.sync_batchnorm,
                      "under DDP: BatchNorm statistics over every process's batch together"));
  group(app.add_option("--reload-dataloaders-every-n-epochs", o.reload_dataloaders_every_n_epochs,
                       "new loaders from the data module every N epochs; 0 = once")
            ->check(at_least(0)));
  if (want("profile_steps"))
    group(app.add_option("--profile-steps", o.profile_steps, "A:B: profile optimizer steps A to B-1")
              ->check(checked_by([](const std::string& s) { parse_profile_steps(s); }, "A:B")));
  if (want("seed"))
    group(app.add_option("--seed", o.seed, "seed_everything at construction; -1 = none")->check(at_least(-1)));
}

// Reads YAML (and so JSON) config files for CLI11; writes the effective configuration as YAML.
class YamlConfig : public CLI::Config {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    YAML::Node root;
    try {
      root = YAML::Load(in);
    } catch (const YAML::Exception& e) {
      throw CLI::ConfigError("--config: not valid YAML/JSON: " + std::string(e.what()));
    }
    std::vector<CLI::ConfigItem> items;
    if (root.IsNull()) return items;  // an empty file
    if (!root.IsMap()) throw CLI::ConfigError("--config: expected a mapping of option names to values at the top level");
    add_map(root, items, /*section=*/"");
    return items;
  }

  std::string to_config(const CLI::App* app, bool default_also, bool, std::string) const override {
    YAML::Emitter out;
    out << YAML::BeginMap;
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
      const std::string name = opt->get_lnames().front();
      if (name == "help" || name == "config" || name == "print-config") continue;
      const bool flag = opt->get_expected_min() == 0;
      std::vector<std::string> values;
      if (opt->count() > 0) {
        // A flag's value after negation (--no-x) and config input; an option's values as given.
        values = flag ? std::vector<std::string>{opt->as<bool>() ? "true" : "false"} : opt->results();
      } else if (default_also) {
        values = {opt->get_default_str()};
      } else {
        continue;
      }
      std::string key = name;
      for (char& c : key)
        if (c == '-') c = '_';
      out << YAML::Key << key << YAML::Value;
      if (values.size() == 1 && values[0].empty()) {
        out << YAML::Null;  // unset: reading it back keeps the default
      } else if (values.size() == 1) {
        out << values[0];
      } else {
        out << YAML::Flow << YAML::BeginSeq;
        for (const auto& v : values) out << v;
        out << YAML::EndSeq;
      }
    }
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
  }

 private:
  static void add_map(const YAML::Node& map, std::vector<CLI::ConfigItem>& items, const std::string& section) {
    for (const auto& kv : map) {
      const std::string where = section.empty() ? std::string("the top level") : "section '" + section + "'";
      if (!kv.first.IsScalar() || kv.first.Scalar().empty())
        throw CLI::ConfigError("--config: a key at " + where + " is empty or not a name; expected option names");
      const std::string key = kv.first.Scalar();
      const YAML::Node& v = kv.second;
      if (v.IsMap()) {
        if (section.empty() && key == "trainer") {
          add_map(v, items, key);
          continue;
        }
        throw CLI::ConfigError("--config: '" + (section.empty() ? key : section + "." + key) +
                               "' is a section; only option values (and a 'trainer:' section) are read");
      }
      CLI::ConfigItem item;
      item.name = detail::flag_name(key);
      if (v.IsSequence()) {
        for (const auto& e : v) {
          if (!e.IsScalar())
            throw CLI::ConfigError("--config: '" + key + "' holds a nested value; expected scalars");
          item.inputs.push_back(e.Scalar());
        }
      } else if (v.IsNull()) {
        continue;  // "key:" with no value leaves the default
      } else {
        item.inputs.push_back(detail::scalar_text(v));
      }
      items.push_back(std::move(item));
    }
  }
};

// --config FILE and --print-config. Call after the program's own options are registered (print-config lists
// them all). Run check_config_file before app.parse for a clear error on unknown keys.
inline void add_config_flags(CLI::App& app) {
  app.config_formatter(std::make_shared<YamlConfig>());
  app.set_config("--config", "", "YAML or JSON file of flag values (keys: flag names; the command line wins)")
      ->group("Config");
  const std::string help = "print the effective configuration as YAML (usable with --config) and exit";
  app.add_flag("--print-config", help)->group("Config");
}

inline bool print_config_requested(const CLI::App& app) { return app.count("--print-config") > 0; }

// The configuration in effect after parsing, as YAML.
inline std::string config_yaml(const CLI::App& app) { return app.config_to_str(/*default_also=*/true, false); }

// Before app.parse: reads the file named by --config (if any) and fails, naming the file, on a key that is no
// option of `app` (CLI11 would only say "argument not expected"). Syntax errors are left to the parse.
inline void check_config_file(const CLI::App& app, int argc, const char* const* argv) {
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) file = argv[i + 1];
    else if (arg.rfind("--config=", 0) == 0) file = arg.substr(9);
  }
  if (file.empty()) return;
  std::ifstream in(file);
  if (!in.good()) return;  // the parse reports a missing file
  std::vector<CLI::ConfigItem> items;
  try {
    items = YamlConfig().from_config(in);
  } catch (const CLI::ConfigError&) {
    return;  // reported by the parse
  }
  std::vector<std::string> unknown;
  for (const auto& item : items)
    if (app.get_option_no_throw("--" + item.name) == nullptr) unknown.push_back(item.name);
  if (unknown.empty()) return;
  std::string list;
  for (const auto& u : unknown) list += (list.empty() ? "'" : ", '") + u + "'";
  VOLT_FAIL("--config ", file, ": unknown key", unknown.size() > 1 ? "s " : " ", list,
            " (not a flag of this program; --help lists them, --print-config shows a complete file)");
}

}  // namespace volt::cli
