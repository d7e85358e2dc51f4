// The option table (trainer/cli/option_table.h) and what is generated from it (trainer/cli/trainer_flags.h,
// config_file.h): the rows are the fields the examples' flags always covered, under the same flag names; every
// row round-trips from a flag, a config-file key and set_option into the field; bad values give the messages
// the flags always gave; --help lists every row; and --strategy takes a strategy registered by a program, with
// no edit to the CLI.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include <volt/trainer/cli/config_file.h>
#include <volt/trainer/cli/option_table.h>
#include <volt/trainer/cli/trainer_flags.h>
#include <volt/trainer/strategies/registry.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// Every TrainerOptions field the old examples/trainer_flags.h gave a flag, in its order. The fields of
// TrainerOptions without a row are objects or have another meaning on the command line: callbacks, loggers and
// logger (the examples' --logger picks logger objects).
const std::vector<std::string> kFields = {
    "accelerator", "devices", "auto_select_gpus", "strategy", "fsdp_min_num_params", "fsdp_wrap", "dp_replicas",
    "num_nodes", "precision", "grad_scaler.init_scale", "grad_scaler.growth_factor", "grad_scaler.backoff_factor",
    "grad_scaler.growth_interval", "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time",
    "val_check_interval", "check_val_every_n_epoch", "limit_train_batches", "limit_val_batches", "limit_test_batches",
    "limit_predict_batches", "num_sanity_val_steps", "accumulate_grad_batches", "gradient_clip_val",
    "gradient_clip_algorithm", "checkpoint_layout", "deterministic", "benchmark", "detect_anomaly",
    "on_nonfinite_loss", "cuda_graphs", "enable_progress_bar", "enable_model_summary", "enable_checkpointing",
    "default_root_dir", "log_every_n_steps", "log_level", "profiler", "profiler_dir", "fast_dev_run",
    "overfit_batches", "sync_batchnorm", "reload_dataloaders_every_n_epochs", "profile_steps", "seed"};

// A value other than the default for each row, as text (booleans: the other one).
const std::map<std::string, std::string> kTextSamples = {
    {"accelerator", "cpu"}, {"devices", "2"}, {"strategy", "ddp"}, {"fsdp_wrap", "encoder,decoder.l1"},
    {"precision", "bf16-mixed"}, {"max_time", "00:00:01:00"}, {"val_check_interval", "10"},
    {"limit_train_batches", "0.25"}, {"limit_val_batches", "3"}, {"limit_test_batches", "0.5"},
    {"limit_predict_batches", "7"}, {"overfit_batches", "0.1"}, {"gradient_clip_algorithm", "value"},
    {"checkpoint_layout", "sharded"}, {"on_nonfinite_loss", "stop"}, {"cuda_graphs", "off"},
    {"default_root_dir", "runs/x"}, {"log_level", "debug"}, {"profiler", "simple"}, {"profiler_dir", "prof"},
    {"profile_steps", "2:5"}};

std::string sample(const cli::OptionField& row) {
  if (auto it = kTextSamples.find(row.name); it != kTextSamples.end()) return it->second;
  if (row.is_flag()) return cli::option_text(row, TrainerOptions{}) == "true" ? "false" : "true";
  if (row.type_name() == "INT") return "7";
  if (row.type_name() == "FLOAT") return "0.25";
  ADD_FAILURE() << "no sample value for row " << row.name << ": add one to kTextSamples";
  return "";
}

// The flags that set `row` to sample(row) on a command line.
std::vector<std::string> sample_flags(const cli::OptionField& row) {
  const std::string v = sample(row);
  if (!row.is_flag()) return {row.flag, v};
  if (v == "true") return {row.flag};
  return {row.negation.empty() ? row.flag + "=false" : row.negation};
}

struct Parse {
  bool ok = false;
  std::string error;
};

Parse parse(CLI::App& app, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  try {
    cli::check_config_file(app, static_cast<int>(argv.size()), argv.data());
    app.parse(static_cast<int>(argv.size()), argv.data());
    return {true, ""};
  } catch (const CLI::ParseError& e) {
    return {false, e.what()};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

cli::OptionField row_of_flag(const std::string& flag) {
  for (const auto& row : cli::trainer_option_table())
    if (row.flag == flag) return row;
  ADD_FAILURE() << "no row has the flag " << flag;
  return {};
}

// The text of every row of `o`, by name.
std::map<std::string, std::string> texts(const TrainerOptions& o) {
  std::map<std::string, std::string> out;
  for (const auto& row : cli::trainer_option_table()) out[row.name] = cli::option_text(row, o);
  return out;
}

}  // namespace

TEST(OptionTable, CoversTheFieldsTheFlagsAlwaysHadUnderTheSameNames) {
  std::vector<std::string> names, flags;
  for (const auto& row : cli::trainer_option_table()) {
    names.push_back(row.name);
    flags.push_back(row.flag);
    EXPECT_FALSE(row.help.empty()) << row.name;
    EXPECT_EQ(cli::trainer_option(row.name).flag, row.flag);
  }
  EXPECT_EQ(names, kFields);
  // The flag is the name with dashes; the four "off" spellings are the ones the examples always took.
  EXPECT_EQ(flags[9], "--grad-scaler-init-scale");
  EXPECT_EQ(cli::trainer_option("max_steps").flag, "--max-steps");
  EXPECT_EQ(cli::trainer_option("reload_dataloaders_every_n_epochs").flag, "--reload-dataloaders-every-n-epochs");
  std::map<std::string, std::string> negations;
  for (const auto& row : cli::trainer_option_table())
    if (!row.negation.empty()) negations[row.name] = row.negation;
  EXPECT_EQ(negations, (std::map<std::string, std::string>{{"benchmark", "--no-benchmark"},
                                                           {"enable_checkpointing", "--no-checkpointing"},
                                                           {"enable_model_summary", "--no-model-summary"},
                                                           {"enable_progress_bar", "--no-progress-bar"}}));
  VOLT_EXPECT_ERROR(cli::trainer_option("loggers"), "trainer_option: 'loggers'", "max_steps");
}

TEST(OptionTable, DefaultsAreTheOptionsDefaults) {
  const auto t = texts(TrainerOptions{});
  EXPECT_EQ(t.at("max_steps"), "-1");
  EXPECT_EQ(t.at("num_sanity_val_steps"), "2");
  EXPECT_EQ(t.at("grad_scaler.init_scale"), "65536");
  EXPECT_EQ(t.at("grad_scaler.backoff_factor"), "0.5");
  EXPECT_EQ(t.at("limit_train_batches"), "1.0");
  EXPECT_EQ(t.at("overfit_batches"), "0.0");
  EXPECT_EQ(t.at("gradient_clip_algorithm"), "norm");
  EXPECT_EQ(t.at("cuda_graphs"), "auto");
  EXPECT_EQ(t.at("enable_progress_bar"), "true");
  EXPECT_EQ(t.at("benchmark"), "");  // unset
  EXPECT_EQ(t.at("fsdp_wrap"), "");
  EXPECT_EQ(t.at("strategy"), "auto");
}

// Each row from its flag, from a config-file key and from set_option: the row's text becomes the sample, and no
// other row changes (two rows never share a field).
TEST(OptionTable, EveryRowRoundTripsFromFlagConfigAndText) {
  ScratchDir dir("option_table_round_trip");
  const auto defaults = texts(TrainerOptions{});
  for (const auto& row : cli::trainer_option_table()) {
    SCOPED_TRACE(row.name);
    const std::string want = sample(row);
    auto check = [&](const TrainerOptions& o, const char* how) {
      auto got = texts(o);
      EXPECT_EQ(got.at(row.name), want) << how;
      got[row.name] = defaults.at(row.name);
      EXPECT_EQ(got, defaults) << how << ": another row changed";
    };
    {
      CLI::App app;
      TrainerOptions o;
      cli::add_trainer_flags(app, o);
      const Parse p = parse(app, sample_flags(row));
      ASSERT_TRUE(p.ok) << p.error;
      check(o, "flag");
    }
    {
      CLI::App app;
      TrainerOptions o;
      cli::add_trainer_flags(app, o);
      cli::add_config_flags(app);
      std::string key = row.flag.substr(2);
      std::replace(key.begin(), key.end(), '-', '_');
      const std::string file = (dir.path / "run.yaml").string();
      std::ofstream(file) << "trainer:\n  " << key << ": '" << want << "'\n";
      const Parse p = parse(app, {"--config", file});
      ASSERT_TRUE(p.ok) << p.error;
      check(o, "config file");
    }
    TrainerOptions o;
    cli::set_option(row, o, want);
    check(o, "set_option");
  }
}

TEST(OptionTable, FlagsWriteTheFieldsThemselves) {
  CLI::App app;
  TrainerOptions o;
  cli::add_trainer_flags(app, o);
  std::vector<std::string> args;
  for (const auto& row : cli::trainer_option_table())
    for (auto& f : sample_flags(row)) args.push_back(f);
  const Parse p = parse(app, args);
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(o.accelerator, "cpu");
  EXPECT_EQ(o.devices, "2");
  EXPECT_TRUE(o.auto_select_gpus);
  EXPECT_EQ(o.strategy, "ddp");
  EXPECT_EQ(o.fsdp_min_num_params, 7);
  EXPECT_EQ(o.fsdp_wrap, (std::vector<std::string>{"encoder", "decoder.l1"}));
  EXPECT_TRUE(o.dp_replicas);
  EXPECT_EQ(o.num_nodes, 7);
  EXPECT_EQ(o.precision, "bf16-mixed");
  EXPECT_DOUBLE_EQ(o.grad_scaler.init_scale, 0.25);
  EXPECT_DOUBLE_EQ(o.grad_scaler.growth_factor, 0.25);
  EXPECT_DOUBLE_EQ(o.grad_scaler.backoff_factor, 0.25);
  EXPECT_EQ(o.grad_scaler.growth_interval, 7);
  EXPECT_EQ(o.max_epochs, 7);
  EXPECT_EQ(o.min_epochs, 7);
  EXPECT_EQ(o.max_steps, 7);
  EXPECT_EQ(o.min_steps, 7);
  EXPECT_EQ(o.max_time, "00:00:01:00");
  EXPECT_FALSE(o.val_check_interval.is_fraction);
  EXPECT_EQ(o.val_check_interval.count, 10);
  EXPECT_EQ(o.check_val_every_n_epoch, 7);
  EXPECT_DOUBLE_EQ(o.limit_train_batches.fraction, 0.25);
  EXPECT_EQ(o.limit_val_batches.count, 3);
  EXPECT_DOUBLE_EQ(o.limit_test_batches.fraction, 0.5);
  EXPECT_EQ(o.limit_predict_batches.count, 7);
  EXPECT_EQ(o.num_sanity_val_steps, 7);
  EXPECT_EQ(o.accumulate_grad_batches, 7);
  EXPECT_DOUBLE_EQ(o.gradient_clip_val, 0.25);
  EXPECT_EQ(o.gradient_clip_algorithm, GradClipAlgorithm::value);
  EXPECT_EQ(o.checkpoint_layout, CheckpointLayout::sharded);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(o.benchmark, std::optional<bool>(true));
  EXPECT_TRUE(o.detect_anomaly);
  EXPECT_EQ(o.on_nonfinite_loss, NonFiniteLoss::stop);
  EXPECT_EQ(o.cuda_graphs, CudaGraphs::off);
  EXPECT_FALSE(o.enable_progress_bar);
  EXPECT_FALSE(o.enable_model_summary);
  EXPECT_FALSE(o.enable_checkpointing);
  EXPECT_EQ(o.default_root_dir, "runs/x");
  EXPECT_EQ(o.log_every_n_steps, 7);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.profiler, "simple");
  EXPECT_EQ(o.profiler_dir, "prof");
  EXPECT_EQ(o.fast_dev_run, 7);
  EXPECT_DOUBLE_EQ(o.overfit_batches.fraction, 0.1);
  EXPECT_TRUE(o.sync_batchnorm);
  EXPECT_EQ(o.reload_dataloaders_every_n_epochs, 7);
  EXPECT_EQ(o.profile_steps, "2:5");
  EXPECT_EQ(o.seed, 7);
  // The flags' values pass the Trainer's own checks.
  o.enable_progress_bar = false;
  EXPECT_NO_THROW(o.validate());
}

// The messages examples/trainer_flags.h gave, word for word, from the command line and from set_option; values
// that do not fit the field are refused by name (they were accepted, clamped, or a bare "Could not convert").
TEST(OptionTable, BadValuesGiveTheMessagesTheFlagsAlwaysGave) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> rows = {
      {{"--max-steps", "-2"}, "--max-steps: must be >= -1, got -2"},
      {{"--max-steps", "1e3"}, "--max-steps: expected an integer, got '1e3'"},
      {{"--num-nodes", "two"}, "--num-nodes: expected an integer, got 'two'"},
      {{"--num-nodes", "0"}, "--num-nodes: must be >= 1, got 0"},
      {{"--limit-train-batches", "1.5"},
       "--limit-train-batches: expected a batch count (e.g. 10) or a fraction of the epoch in [0, 1] (e.g. 0.25), "
       "got '1.5'"},
      {{"--limit-val-batches", " 3"},
       "--limit-val-batches: expected a batch count (e.g. 10) or a fraction of the epoch in [0, 1] (e.g. 0.25), "
       "got ' 3'"},
      {{"--gradient-clip-algorithm", "l2"}, "--gradient-clip-algorithm: got 'l2'; expected one of norm, value"},
      {{"--checkpoint-layout", "ranks"}, "--checkpoint-layout: got 'ranks'; expected one of full, sharded"},
      {{"--on-nonfinite-loss", "retry"}, "--on-nonfinite-loss: got 'retry'; expected one of ignore, skip, stop"},
      {{"--cuda-graphs", "maybe"}, "--cuda-graphs: got 'maybe'; expected one of auto, on, off"},
      {{"--accelerator", "tpu"}, "--accelerator: got 'tpu'; expected one of cpu, gpu, cuda, auto"},
      {{"--max-time", "soon"},
       "--max-time: Trainer: max_time=\"soon\" is not valid; expected \"DD:HH:MM:SS\" or a number of seconds"},
      {{"--gradient-clip-val", "-1"}, "--gradient-clip-val: must be a finite number >= 0, got -1"},
      {{"--gradient-clip-val", "abc"}, "--gradient-clip-val: expected a number, got 'abc'"},
      {{"--grad-scaler-init-scale", "nan"}, "--grad-scaler-init-scale: must be a finite number >= 0, got nan"},
      {{"--log-level", "loud"}, "--log-level: log level \"loud\" is not one of trace, debug, info, warn, error, off"},
      {{"--max-steps", "99999999999999999999"},
       "--max-steps: must be an integer from -9223372036854775808 to 9223372036854775807, got 99999999999999999999"},
      {{"--num-nodes", "99999999999"}, "--num-nodes: must be an integer from -2147483648 to 2147483647, got 99999999999"},
  };
  for (const auto& [args, message] : rows) {
    SCOPED_TRACE(args[0] + " " + args[1]);
    CLI::App app;
    TrainerOptions o;
    cli::add_trainer_flags(app, o);
    const Parse p = parse(app, args);
    EXPECT_FALSE(p.ok);
    EXPECT_EQ(p.error, message);
    TrainerOptions direct;
    try {
      cli::set_option(row_of_flag(args[0]), direct, args[1]);
      ADD_FAILURE() << "set_option took it";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  CLI::App app;
  TrainerOptions o;
  cli::add_trainer_flags(app, o);
  const Parse p = parse(app, {"--benchmark=maybe"});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, "--benchmark: expected true or false, got 'maybe'");
}

TEST(OptionTable, HelpListsEveryRowWithItsDefault) {
  CLI::App app{"test"};
  TrainerOptions o;
  o.max_steps = 123;  // defaults are the object's values when the flags are added
  cli::add_trainer_flags(app, o);
  const std::string help = app.help();
  for (const auto& row : cli::trainer_option_table()) {
    SCOPED_TRACE(row.name);
    EXPECT_NE(help.find(row.flag), std::string::npos);
    if (!row.negation.empty()) EXPECT_NE(help.find(row.negation), std::string::npos);
    EXPECT_NE(help.find(row.help), std::string::npos);
  }
  EXPECT_NE(help.find("--max-steps INT:>= -1=123"), std::string::npos) << help;
  EXPECT_NE(help.find("--limit-train-batches TEXT:COUNT|FRACTION=1.0"), std::string::npos) << help;
  EXPECT_NE(help.find("--grad-scaler-init-scale FLOAT:>= 0=65536"), std::string::npos) << help;
  EXPECT_NE(help.find("--gradient-clip-algorithm TEXT:norm, value=norm"), std::string::npos) << help;
  EXPECT_NE(help.find("--enable-progress-bar,--no-progress-bar{false}=true"), std::string::npos) << help;
  EXPECT_NE(help.find("Trainer:"), std::string::npos) << help;
}

TEST(OptionTable, SkippedRowsHaveNoFlag) {
  CLI::App app;
  TrainerOptions o;
  cli::add_trainer_flags(app, o, {"max_epochs", "seed", "enable_progress_bar"});
  EXPECT_EQ(app.get_option_no_throw("--max-epochs"), nullptr);
  EXPECT_EQ(app.get_option_no_throw("--seed"), nullptr);
  EXPECT_EQ(app.get_option_no_throw("--enable-progress-bar"), nullptr);
  EXPECT_NE(app.get_option_no_throw("--max-steps"), nullptr);
  EXPECT_EQ(app.get_options().size(), kFields.size() - 3 + 1);  // + --help
}

// A strategy a program registers is a --strategy value and in the help, with no edit to the table or the flags,
// even when it is registered after the flags were added; once unregistered it is refused, by the registry's list.
TEST(OptionTable, StrategyNamesComeFromTheRegistry) {
  CLI::App app;
  TrainerOptions o;
  cli::add_trainer_flags(app, o);
  register_strategy("cli_test_strategy", {.make = [](const StrategyOptions& so) {
                                            return make_strategy("single_device", so.devices);
                                          },
                                          .help = "test: the single-device strategy under another name"});
  EXPECT_NE(cli::trainer_option("strategy").help.find("| cli_test_strategy"), std::string::npos);
  const Parse p = parse(app, {"--strategy", "cli_test_strategy"});
  EXPECT_TRUE(p.ok) << p.error;
  EXPECT_EQ(o.strategy, "cli_test_strategy");
  // The Trainer takes it too.
  ScratchDir dir("option_table_strategy");
  TrainerOptions t = quiet(dir.str());
  t.strategy = o.strategy;
  EXPECT_EQ(Trainer(t).strategy().name(), "single_device");
  EXPECT_TRUE(unregister_strategy("cli_test_strategy"));
  CLI::App again;
  TrainerOptions o2;
  cli::add_trainer_flags(again, o2);
  const Parse refused = parse(again, {"--strategy", "cli_test_strategy"});
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.error.find("--strategy: got 'cli_test_strategy'; expected one of auto, single_device, ddp"),
            std::string::npos)
      << refused.error;
  EXPECT_EQ(cli::trainer_option("strategy").help.find("cli_test_strategy"), std::string::npos);
}

TEST(OptionTable, PrintConfigReadsBackToTheSameOptions) {
  ScratchDir dir("option_table_print_config");
  CLI::App app;
  TrainerOptions o;
  cli::add_trainer_flags(app, o);
  cli::add_config_flags(app);
  std::vector<std::string> args;
  for (const auto& row : cli::trainer_option_table())
    for (auto& f : sample_flags(row)) args.push_back(f);
  ASSERT_TRUE(parse(app, args).ok);
  const std::string printed = cli::config_yaml(app);
  const std::string file = (dir.path / "printed.yaml").string();
  std::ofstream(file) << printed;
  CLI::App back;
  TrainerOptions o2;
  cli::add_trainer_flags(back, o2);
  cli::add_config_flags(back);
  const Parse p = parse(back, {"--config", file});
  ASSERT_TRUE(p.ok) << p.error << "\n" << printed;
  EXPECT_EQ(texts(o2), texts(o));
}
