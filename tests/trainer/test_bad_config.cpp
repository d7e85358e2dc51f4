// Table-driven bad configurations: every row is a clear error (the option or flag, the value, what was
// expected) raised before any training work (no training_step runs, no model is built for a bad flag).
#include <unistd.h>

#include <algorithm>
#include <ios>
#include <optional>
#include <streambuf>
#include <tuple>

#include "examples/example_common.h"
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

namespace {

struct TrainerRow {
  const char* name;
  std::function<void(TrainerOptions&)> edit;
  std::vector<std::string> words;
  int64_t n_samples = 8;        // training samples (batch 2)
  std::string ckpt = "";        // fit's ckpt_path
};

}  // namespace

TEST(BadConfig, TrainerRowsFailBeforeTraining) {
  ScratchDir dir("bad_config");
  const std::string file = (dir.path / "a_file").string();
  std::ofstream(file) << "not a directory";
  const std::vector<TrainerRow> rows = {
      {"precision unknown", [](TrainerOptions& o) { o.precision = "fp8"; }, {"precision=\"fp8\"", "expected"}},
      {"precision wrong case", [](TrainerOptions& o) { o.precision = "BF16-Mixed"; },
       {"precision=\"BF16-Mixed\"", "\"bf16-mixed\"", "\"32-true\""}},
      // Without a GPU, asking for one fails; with one, asking for a GPU that is not there does.
      cuda_available()
          ? TrainerRow{"gpu that is not there", [](TrainerOptions& o) { o.accelerator = "gpu"; o.devices = "[99]"; },
                       {"GPU id 99", "does not exist"}}
          : TrainerRow{"gpu without gpu", [](TrainerOptions& o) { o.accelerator = "gpu"; }, {"accelerator 'gpu'", "no GPU"}},
      {"accelerator unknown", [](TrainerOptions& o) { o.accelerator = "tpu"; }, {"accelerator 'tpu'", "expected"}},
      {"cpu devices zero", [](TrainerOptions& o) { o.devices = "0"; }, {"devices='0'", "positive"}},
      {"cpu devices text", [](TrainerOptions& o) { o.devices = "two"; }, {"devices='two'"}},
      {"strategy unknown", [](TrainerOptions& o) { o.strategy = "horovod"; }, {"strategy=\"horovod\"", "expected"}},
      {"single device, two devices", [](TrainerOptions& o) { o.strategy = "single_device"; o.devices = "2"; },
       {"single_device", "needs one device"}},
      {"max_epochs", [](TrainerOptions& o) { o.max_epochs = -5; }, {"max_epochs=-5"}},
      {"max_steps", [](TrainerOptions& o) { o.max_steps = -2; }, {"max_steps=-2"}},
      {"accumulate", [](TrainerOptions& o) { o.accumulate_grad_batches = 0; }, {"accumulate_grad_batches=0", ">= 1"}},
      {"val interval", [](TrainerOptions& o) { o.val_check_interval = 1.5; }, {"val_check_interval=1.5"}},
      {"clip algorithm", [](TrainerOptions& o) { o.gradient_clip_algorithm = static_cast<GradClipAlgorithm>(7); }, {"gradient_clip_algorithm=7", "not a GradClipAlgorithm"}},
      {"checkpoint layout", [](TrainerOptions& o) { o.checkpoint_layout = static_cast<CheckpointLayout>(5); }, {"checkpoint_layout=5", "not a CheckpointLayout"}},
      {"max_time", [](TrainerOptions& o) { o.max_time = "soon"; }, {"max_time=\"soon\""}},
      {"limit negative", [](TrainerOptions& o) { o.limit_train_batches = int64_t{-1}; }, {"limit_train_batches=-1"}},
      {"limit to nothing", [](TrainerOptions& o) { o.limit_train_batches = 0.1; }, {"limit_train_batches=0.1",
                                                                                   "leaves 0 batches"}},
      {"empty training set", [](TrainerOptions&) {}, {"training loader has 0 batches", "0 samples", "batch_size=2"}, 0},
      {"root dir is a file", [&](TrainerOptions& o) { o.default_root_dir = file; }, {"default_root_dir", "a_file"}},
      {"root dir under /dev/null", [](TrainerOptions& o) { o.default_root_dir = "/dev/null/run"; },
       {"default_root_dir", "/dev/null/run", "cannot create"}},
      {"missing checkpoint", [](TrainerOptions&) {}, {"no_such_ckpt", "not a complete Volt checkpoint", "missing"}, 8,
       "no_such_ckpt"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    TinyModule m;
    try {
      auto o = quiet(dir.str());
      o.max_epochs = 1;
      row.edit(o);
      Trainer t(o);
      auto loader = row.n_samples ? make_loader(row.n_samples, 2)
                                  : std::make_shared<data::DataLoader>(
                                        std::make_shared<data::TensorDataset>(zeros({0, 3}), zeros({0})),
                                        data::DataLoaderOptions{.batch_size = 2});
      t.fit(m, loader, nullptr, row.ckpt.empty() ? "" : (dir.path / row.ckpt).string());
      ADD_FAILURE() << row.name << ": no error";
    } catch (const Error& e) {
      for (const auto& w : row.words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << "'" << e.what() << "' lacks '" << w << "'";
    }
    EXPECT_EQ(m.train_steps, 0) << "training started before the error";
  }
}

TEST(BadConfig, LimitTrainBatchesZeroSkipsTrainingOnPurpose) {
  ScratchDir dir("bad_config_skip");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.limit_train_batches = int64_t{0};
  Trainer t(o);
  t.fit(m, make_loader(8, 2));
  EXPECT_EQ(m.train_steps, 0);
  EXPECT_EQ(t.global_step(), 0);
}

namespace {

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (auto& a : args) v.push_back(a.data());
  v.push_back(nullptr);
  return v;
}

}  // namespace

TEST(BadConfig, ExampleFlagsAreValidatedWithReadableMessages) {
  struct Row {
    std::vector<std::string> flags;
    std::vector<std::string> words;
  };
  const std::vector<Row> rows = {
      {{"--batch-size", "0"}, {"--batch-size", "must be a positive integer, got 0"}},
      {{"--batch-size", "abc"}, {"--batch-size", "'abc'", "not an integer"}},
      {{"--batch-size", "-3"}, {"--batch-size", "positive integer", "-3"}},
      {{"--epochs", "0"}, {"--epochs", "positive integer"}},
      {{"--epochs", "1.5"}, {"--epochs", "not an integer"}},
      {{"--seed", "-1"}, {"--seed", "non-negative integer", "-1"}},
      {{"--seed", "99999999999999999999999"}, {"--seed", "not an integer"}},
      {{"--lr", "0"}, {"--lr", "positive finite number"}},
      {{"--lr", "nan"}, {"--lr", "positive finite number"}},
      {{"--lr", "fast"}, {"--lr", "not a number"}},
      {{"--num-workers", "-2"}, {"--num-workers", "0 to 1024"}},
      {{"--devices", "many"}, {"--devices", "'many'", "expected auto"}},
      {{"--accelerator", "tpu"}, {"--accelerator", "'tpu'", "cpu, gpu"}},
      {{"--strategy", "horovod"}, {"--strategy", "'horovod'", "ddp"}},
      {{"--precision", "fp8"}, {"--precision", "'fp8'", "32-true", "bf16-true"}},
      {{"--logger", "wandb"}, {"--logger", "'wandb'", "csv, tensorboard, both, none"}},
      {{"--out", ""}, {"--out", "must not be empty"}},
      {{"--no-such-flag"}, {"--no-such-flag"}},
  };
  for (const auto& row : rows) {
    std::vector<std::string> args = {"prog"};
    args.insert(args.end(), row.flags.begin(), row.flags.end());
    SCOPED_TRACE(args[1] + (args.size() > 2 ? " " + args[2] : ""));
    auto argv = argv_of(args);
    examples::Args a;
    int code = 0;
    ::testing::internal::CaptureStderr();
    ::testing::internal::CaptureStdout();
    const bool ok = examples::parse_args(static_cast<int>(args.size()), argv.data(), "test", a, code);
    const std::string err = ::testing::internal::GetCapturedStderr() + ::testing::internal::GetCapturedStdout();
    EXPECT_FALSE(ok);
    EXPECT_NE(code, 0);
    for (const auto& w : row.words) EXPECT_NE(err.find(w), std::string::npos) << "'" << err << "' lacks '" << w << "'";
  }
  // Good values still parse.
  std::vector<std::string> args = {"prog", "--batch-size", "32", "--seed", "0", "--lr", "3e-4", "--devices", "0,1"};
  auto argv = argv_of(args);
  examples::Args a;
  int code = 0;
  ASSERT_TRUE(examples::parse_args(static_cast<int>(args.size()), argv.data(), "test", a, code));
  EXPECT_EQ(a.batch_size, 32);
  EXPECT_EQ(a.seed, 0u);
  EXPECT_DOUBLE_EQ(a.lr, 3e-4);
  EXPECT_EQ(a.devices, "0,1");
}

TEST(BadConfig, ExampleRunFailsBeforeBuildingTheModel) {
  ScratchDir dir("bad_config_example");
  const std::string file = (dir.path / "a_file").string();
  std::ofstream(file) << "x";
  struct Row {
    std::vector<std::string> flags;
    std::vector<std::string> words;
  };
  const std::vector<Row> rows = {
      {{"--out", file}, {"--out", "a_file"}},
      {{"--out", "/dev/null"}, {"--out", "/dev/null"}},
      {{"--out", "/dev/null/run"}, {"--out", "cannot create"}},
      cuda_available() ? Row{{"--accelerator", "gpu", "--devices", "0,99"}, {"GPU id 99", "does not exist"}}
                       : Row{{"--accelerator", "gpu"}, {"accelerator 'gpu'", "no GPU"}},
      {{"--devices", "3", "--strategy", "single_device"}, {"single_device", "needs one device"}},
      {{"--resume", (dir.path / "nope").string()}, {"--resume", "nope", "no such checkpoint"}},
  };
  for (const auto& row : rows) {
    auto has = [&](const char* f) { return std::find(row.flags.begin(), row.flags.end(), f) != row.flags.end(); };
    std::vector<std::string> args = {"prog", "--no-progress-bar"};
    if (!has("--accelerator")) args.insert(args.end(), {"--accelerator", "cpu"});
    if (!has("--out")) args.insert(args.end(), {"--out", (dir.path / "run").string()});
    args.insert(args.end(), row.flags.begin(), row.flags.end());
    SCOPED_TRACE(row.flags[0] + " " + (row.flags.size() > 1 ? row.flags[1] : ""));
    auto argv = argv_of(args);
    bool built = false;
    ::testing::internal::CaptureStderr();
    const int code = examples::run_example(static_cast<int>(args.size()), argv.data(), "ex", "test", examples::Args{},
                                           false, [&](double) {
                                             built = true;
                                             return std::make_unique<TinyModule>();
                                           });
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 1);
    EXPECT_FALSE(built) << "the model was built before the error";
    for (const auto& w : row.words) EXPECT_NE(err.find(w), std::string::npos) << "'" << err << "' lacks '" << w << "'";
  }
}

namespace {
// parse_args on `args` (after the program name) with stdout and stderr captured.
struct Parsed {
  bool ok = false;
  int code = 0;
  std::string out, err;
  examples::Args a;
};
Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  auto argv = argv_of(args);
  Parsed p;
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  p.ok = examples::parse_args(static_cast<int>(args.size()), argv.data(), "test", p.a, p.code);
  p.out = ::testing::internal::GetCapturedStdout();
  p.err = ::testing::internal::GetCapturedStderr();
  return p;
}
std::string write_file(const ScratchDir& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir.path / name).string();
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST(ExampleFlags, EveryTrainerOptionHasAFlag) {
  const Parsed p = parse({"--max-steps", "7", "--limit-train-batches", "0.25", "--limit-val-batches", "3",
                          "--val-check-interval", "10", "--accumulate-grad-batches", "2", "--gradient-clip-val", "0.5",
                          "--gradient-clip-algorithm", "value", "--log-every-n-steps", "5", "--default-root-dir", "runs/x",
                          "--max-epochs", "3", "--no-model-summary", "--deterministic", "--on-nonfinite-loss", "skip",
                          "--check-val-every-n-epoch", "2", "--num-sanity-val-steps", "0", "--min-epochs", "1",
                          "--min-steps", "2", "--max-time", "00:00:01:00", "--profiler-dir", "prof",
                          "--no-checkpointing", "--grad-scaler-init-scale", "1024", "--limit-test-batches", "1.0",
                          "--detect-anomaly", "--fast-dev-run", "3", "--overfit-batches", "0.1",
                          "--reload-dataloaders-every-n-epochs", "2", "--sync-batchnorm", "--checkpoint-layout", "sharded",
                          "--cuda-graphs", "off"});
  ASSERT_TRUE(p.ok) << p.err << p.out;
  const TrainerOptions& t = p.a.trainer;
  EXPECT_EQ(t.max_steps, 7);
  EXPECT_TRUE(t.limit_train_batches.is_fraction);
  EXPECT_DOUBLE_EQ(t.limit_train_batches.fraction, 0.25);
  EXPECT_FALSE(t.limit_val_batches.is_fraction);
  EXPECT_EQ(t.limit_val_batches.count, 3);
  EXPECT_TRUE(t.limit_test_batches.is_fraction);  // "1.0" is a fraction, "1" would be one batch
  EXPECT_FALSE(t.val_check_interval.is_fraction);
  EXPECT_EQ(t.val_check_interval.count, 10);
  EXPECT_EQ(t.accumulate_grad_batches, 2);
  EXPECT_DOUBLE_EQ(t.gradient_clip_val, 0.5);
  EXPECT_EQ(t.gradient_clip_algorithm, GradClipAlgorithm::value);
  EXPECT_EQ(t.checkpoint_layout, CheckpointLayout::sharded);
  EXPECT_EQ(t.log_every_n_steps, 5);
  EXPECT_EQ(p.a.out, "runs/x");  // --default-root-dir is --out
  EXPECT_EQ(p.a.epochs, 3);      // --max-epochs is --epochs
  EXPECT_FALSE(t.enable_model_summary);
  EXPECT_FALSE(t.enable_checkpointing);
  EXPECT_TRUE(t.deterministic);
  EXPECT_TRUE(t.detect_anomaly);
  EXPECT_EQ(t.on_nonfinite_loss, NonFiniteLoss::skip);
  EXPECT_EQ(t.cuda_graphs, CudaGraphs::off);
  EXPECT_EQ(t.check_val_every_n_epoch, 2);
  EXPECT_EQ(t.num_sanity_val_steps, 0);
  EXPECT_EQ(t.min_epochs, 1);
  EXPECT_EQ(t.min_steps, 2);
  EXPECT_EQ(t.max_time, "00:00:01:00");
  EXPECT_EQ(t.profiler_dir, "prof");
  EXPECT_DOUBLE_EQ(t.grad_scaler.init_scale, 1024);
  EXPECT_EQ(t.fast_dev_run, 3);
  EXPECT_TRUE(t.overfit_batches.is_fraction);
  EXPECT_DOUBLE_EQ(t.overfit_batches.fraction, 0.1);
  EXPECT_EQ(t.reload_dataloaders_every_n_epochs, 2);
  EXPECT_TRUE(t.sync_batchnorm);

  struct Row {
    std::vector<std::string> flags;
    std::vector<std::string> words;
  };
  const std::vector<Row> bad = {
      {{"--max-steps", "-2"}, {"--max-steps", ">= -1", "-2"}},
      {{"--limit-train-batches", "1.5"}, {"--limit-train-batches", "fraction of the epoch in [0, 1]", "'1.5'"}},
      {{"--limit-val-batches", "many"}, {"--limit-val-batches", "batch count", "'many'"}},
      {{"--gradient-clip-algorithm", "l2"}, {"--gradient-clip-algorithm", "'l2'", "norm, value"}},
      {{"--checkpoint-layout", "ranks"}, {"--checkpoint-layout", "'ranks'", "full, sharded"}},
      {{"--on-nonfinite-loss", "retry"}, {"--on-nonfinite-loss", "ignore, skip, stop"}},
      {{"--cuda-graphs", "maybe"}, {"--cuda-graphs", "auto, on, off"}},
      {{"--max-time", "soon"}, {"--max-time", "soon"}},
      {{"--accumulate-grad-batches", "0"}, {"--accumulate-grad-batches", ">= 1"}},
      {{"--gradient-clip-val", "-1"}, {"--gradient-clip-val", ">= 0"}},
  };
  for (const auto& row : bad) {
    SCOPED_TRACE(row.flags[0] + " " + row.flags[1]);
    const Parsed b = parse(row.flags);
    EXPECT_FALSE(b.ok);
    EXPECT_NE(b.code, 0) << b.err;
    for (const auto& w : row.words) EXPECT_NE(b.err.find(w), std::string::npos) << "'" << b.err << "' lacks '" << w << "'";
  }
}

TEST(ExampleFlags, ConfigFilesInYamlOrJsonAndTheCommandLineWins) {
  ScratchDir dir("example_config");
  const std::string yaml = write_file(dir, "run.yaml",
                                      "# a run\n"
                                      "batch_size: 32\n"
                                      "lr: 0.001\n"
                                      "trainer:\n"
                                      "  max_steps: 11\n"
                                      "  limit_train_batches: 0.5\n"
                                      "  enable_model_summary: false\n"
                                      "  max_time:\n");
  Parsed p = parse({"--config", yaml, "--max-steps", "4"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_EQ(p.a.batch_size, 32);
  EXPECT_DOUBLE_EQ(p.a.lr, 0.001);
  EXPECT_EQ(p.a.trainer.max_steps, 4) << "the command line overrides the file";
  EXPECT_DOUBLE_EQ(p.a.trainer.limit_train_batches.fraction, 0.5);
  EXPECT_FALSE(p.a.trainer.enable_model_summary);
  EXPECT_EQ(p.a.trainer.max_time, "");

  const std::string json = write_file(dir, "run.json", R"({"max-epochs": 2, "devices": "0,1", "no_progress_bar": true})");
  p = parse({"--config", json});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_EQ(p.a.epochs, 2);
  EXPECT_EQ(p.a.devices, "0,1");
  EXPECT_FALSE(p.a.progress_bar);

  struct Row {
    std::string text;
    std::vector<std::string> words;
  };
  const std::vector<Row> bad = {
      {"max_stepz: 3\n", {"run.bad", "unknown key", "max-stepz"}},
      {"limit_train_batches: 2.5\n", {"--limit-train-batches", "'2.5'"}},
      {"model:\n  hidden: 3\n", {"'model'", "is a section"}},
      {"batch_size: [1, 2\n", {"not valid YAML"}},
      {"- 1\n- 2\n", {"mapping"}},
      {": []\n", {"--config", "empty or not a name", "top level"}},  // found by fuzz_config
      {"trainer:\n  ? [1]\n  : 3\n", {"--config", "not a name", "section 'trainer'"}},
  };
  for (const auto& row : bad) {
    SCOPED_TRACE(row.text);
    const std::string path = write_file(dir, "run.bad", row.text);
    const Parsed b = parse({"--config", path});
    EXPECT_FALSE(b.ok);
    EXPECT_NE(b.code, 0) << b.err;
    for (const auto& w : row.words) EXPECT_NE(b.err.find(w), std::string::npos) << "'" << b.err << "' lacks '" << w << "'";
  }
  const Parsed missing = parse({"--config", (dir.path / "nope.yaml").string()});
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.err.find("nope.yaml"), std::string::npos) << missing.err;
  // found by fuzz_cli: a directory was skipped by the parse and crashed the unknown-key check's YAML read
  const Parsed directory = parse({"--config", dir.path.string()});
  EXPECT_FALSE(directory.ok);
  EXPECT_EQ(directory.code, 2);
  EXPECT_NE(directory.err.find(dir.path.string() + ": is a directory"), std::string::npos) << directory.err;
}

// A read error inside the stream buffer (what a device or a vanished file gives yaml-cpp) is a ConfigError naming
// --config, not an exception escaping the parse. The buffer hands out a first block of valid YAML and fails on the
// next read, as a file failing part-way does (yaml-cpp's reader leaks its prefetch buffer when the very first read
// throws, inside its constructor; a directory, which fails there, never reaches it: check_config_file refuses it).
TEST(ExampleFlags, AConfigReadErrorIsAConfigError) {
  struct FailingBuf : std::streambuf {
    std::string first;
    FailingBuf() {
      for (int i = 0; i < 400; ++i) first += "# a comment line\n";
      setg(first.data(), first.data(), first.data() + first.size());
    }
    int_type underflow() override {
      if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
      throw std::ios_base::failure("simulated read error");
    }
  } buf;
  std::istream in(&buf);
  try {
    (void)cli::YamlConfig().from_config(in);
    ADD_FAILURE() << "no error";
  } catch (const CLI::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--config: could not read the file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("simulated read error"), std::string::npos) << e.what();
  }
}

TEST(ExampleFlags, PrintConfigShowsEverythingAndReadsBack) {
  ScratchDir dir("example_print_config");
  const Parsed p = parse({"--max-steps", "9", "--no-progress-bar", "--limit-val-batches", "0.5", "--print-config"});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.code, 0);
  for (const char* line : {"max_steps: 9", "enable_progress_bar: false", "limit_val_batches: 0.5", "batch_size: 16",
                           "limit_train_batches: 1.0", "accumulate_grad_batches: 1", "gradient_clip_algorithm: norm", "checkpoint_layout: full",
                           "on_nonfinite_loss: ignore", "enable_model_summary: true", "epochs: 1"})
    EXPECT_NE(p.out.find(std::string("\n") + line + "\n"), std::string::npos) << line << " missing from\n" << p.out;
  EXPECT_EQ(p.out.find("print_config"), std::string::npos);
  // The printed file gives the same configuration back.
  const std::string path = write_file(dir, "printed.yaml", p.out);
  const Parsed again = parse({"--config", path, "--print-config"});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, p.out);
  const Parsed used = parse({"--config", path});
  ASSERT_TRUE(used.ok) << used.err;
  EXPECT_EQ(used.a.trainer.max_steps, 9);
  EXPECT_FALSE(used.a.progress_bar);
  EXPECT_DOUBLE_EQ(used.a.trainer.limit_val_batches.fraction, 0.5);
}

TEST(ExampleFlags, FsdpWrapOptions) {
  Parsed p = parse({"--strategy", "fsdp", "--fsdp-wrap", "encoder,decoder.l1", "--fsdp-min-num-params", "1000"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_EQ(p.a.trainer.fsdp_wrap, (std::vector<std::string>{"encoder", "decoder.l1"}));
  EXPECT_EQ(p.a.trainer.fsdp_min_num_params, 1000);
  p = parse({"--strategy", "fsdp"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_TRUE(p.a.trainer.fsdp_wrap.empty());
  p = parse({"--fsdp-min-num-params", "-1"});
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.err.find("--fsdp-min-num-params"), std::string::npos) << p.err;
}

TEST(ExampleFlags, DpReplicas) {
  Parsed p = parse({"--strategy", "dp", "--devices", "2", "--dp-replicas"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_TRUE(p.a.trainer.dp_replicas);
  p = parse({"--strategy", "dp", "--devices", "2"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_FALSE(p.a.trainer.dp_replicas);
}

TEST(ExampleFlags, BenchmarkAndNumNodes) {
  // benchmark is a std::optional<bool>: absent = unset, --benchmark / --no-benchmark / --benchmark=false set it.
  EXPECT_FALSE(parse({}).a.trainer.benchmark.has_value());
  EXPECT_EQ(parse({}).a.trainer.num_nodes, 1);
  struct Row {
    std::vector<std::string> flags;
    std::optional<bool> benchmark;
    int num_nodes;
  };
  const std::vector<Row> rows = {
      {{"--benchmark"}, true, 1},
      {{"--no-benchmark"}, false, 1},
      {{"--benchmark=false"}, false, 1},
      {{"--benchmark=true", "--num-nodes", "4"}, true, 4},
      {{"--no-benchmark", "--benchmark"}, true, 1},  // the last one given wins
      {{"--num-nodes", "2"}, std::nullopt, 2},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.flags[0]);
    const Parsed p = parse(row.flags);
    ASSERT_TRUE(p.ok) << p.err;
    EXPECT_EQ(p.a.trainer.benchmark, row.benchmark);
    EXPECT_EQ(p.a.trainer.num_nodes, row.num_nodes);
  }
  for (const auto& [flags, words] :
       std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{"--num-nodes", "0"}, {"--num-nodes", ">= 1", "0"}},
           {{"--num-nodes", "two"}, {"--num-nodes", "'two'"}},
           {{"--benchmark=maybe"}, {"--benchmark", "maybe"}}}) {
    SCOPED_TRACE(flags[0]);
    const Parsed b = parse(flags);
    EXPECT_FALSE(b.ok);
    EXPECT_NE(b.code, 0);
    for (const auto& w : words) EXPECT_NE(b.err.find(w), std::string::npos) << "'" << b.err << "' lacks '" << w << "'";
  }

  // Config keys, at the top level or under trainer:, and --print-config reading back (unset stays unset).
  ScratchDir dir("example_benchmark_config");
  Parsed p = parse({"--config", write_file(dir, "a.yaml", "trainer:\n  benchmark: true\n  num_nodes: 3\n")});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_EQ(p.a.trainer.benchmark, std::optional<bool>(true));
  EXPECT_EQ(p.a.trainer.num_nodes, 3);
  p = parse({"--config", write_file(dir, "b.yaml", "benchmark: false\nnum-nodes: 2\n"), "--num-nodes", "5"});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_EQ(p.a.trainer.benchmark, std::optional<bool>(false));
  EXPECT_EQ(p.a.trainer.num_nodes, 5) << "the command line overrides the file";
  p = parse({"--config", write_file(dir, "c.json", R"({"benchmark": null})")});
  ASSERT_TRUE(p.ok) << p.err;
  EXPECT_FALSE(p.a.trainer.benchmark.has_value());
  for (const auto& [flags, line, want] : std::vector<std::tuple<std::vector<std::string>, std::string, std::optional<bool>>>{
           {{"--print-config"}, "benchmark: ~", std::nullopt},
           {{"--no-benchmark", "--num-nodes", "2", "--print-config"}, "benchmark: false", false},
           {{"--benchmark", "--print-config"}, "benchmark: true", true}}) {
    SCOPED_TRACE(line);
    const Parsed printed = parse(flags);
    EXPECT_EQ(printed.code, 0) << printed.err;
    EXPECT_NE(printed.out.find("\n" + line + "\n"), std::string::npos) << printed.out;
    const Parsed back = parse({"--config", write_file(dir, "printed.yaml", printed.out)});
    ASSERT_TRUE(back.ok) << back.err;
    EXPECT_EQ(back.a.trainer.benchmark, want);
    EXPECT_EQ(back.a.trainer.num_nodes, flags.size() > 2 ? 2 : 1);
  }
}

TEST(TrainerEnums, SpellingsParseOnceAndBadOnesAreNamed) {
  EXPECT_EQ(parse_gradient_clip_algorithm("norm"), GradClipAlgorithm::norm);
  EXPECT_EQ(parse_gradient_clip_algorithm("value"), GradClipAlgorithm::value);
  EXPECT_EQ(parse_scheduler_interval("step"), SchedulerInterval::step);
  EXPECT_EQ(parse_scheduler_interval("epoch"), SchedulerInterval::epoch);
  EXPECT_EQ(name(GradClipAlgorithm::value), "value");
  EXPECT_EQ(name(SchedulerInterval::step), "step");
  EXPECT_EQ(name(Stage::validate), "validate");
  VOLT_EXPECT_ERROR(parse_gradient_clip_algorithm("l3"), "gradient_clip_algorithm=\"l3\"", "\"norm\", \"value\"");
  VOLT_EXPECT_ERROR(parse_scheduler_interval("hour"), "interval=\"hour\"", "\"epoch\", \"step\"");
  EXPECT_EQ(parse_checkpoint_layout("full"), CheckpointLayout::full);
  EXPECT_EQ(name(CheckpointLayout::sharded), "sharded");
  VOLT_EXPECT_ERROR(parse_checkpoint_layout("ranks"), "checkpoint_layout=\"ranks\"", "\"full\", \"sharded\"");
}
