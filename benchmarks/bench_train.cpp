// bench_train: trains a model through the real Trainer and DataLoader and prints one JSON object per
// (precision, batch size) configuration:
//   {"bench":"train","model":"mlp","batch_size":16,"threads":1,"steps":3000,"world_size":1,"precision":"32-true",
//    "train_samples_per_s":..., "eval_samples_per_s":..., "peak_rss_mb":..., "peak_tensor_mb":...,
//    "speedup_vs_32_true":...}
// Models: --model mlp (the MNIST recipe, 784-128-10, Adam), --model cnn (examples/mnist_cnn's network: two
// conv-BN-ReLU-pool blocks, dropout, a linear head; Adam) or --model wide (784-W-W-10 with --width W, default
// 4096: big enough for the GEMMs to dominate; use --batch-size 1024 as the mixed-precision figure of merit).
// "us_per_step" is the mean wall time of one optimizer step of one rank through the whole training loop (data
// loading, upload, forward, backward, reduction, optimizer, logging) in the steady state: the first tenth of the
// steps (at least 10, "warmup_steps") are left out; "us_per_step_with_warmup" is the whole run's mean.
// "train_samples_per_s" is the steady-state rate. --benchmark on lets cuDNN time its candidate convolution
// algorithms at each shape's first step (the Trainer's `benchmark` option; off by default). --small-gemm off
// sends small f32 products to cuBLAS instead of Volt's own kernel; --tf32 on lets f32 GEMMs use TF32.
// --num-workers N gives the data module's loaders N persistent threads that assemble the batches (training, and
// the validation pass behind "eval_samples_per_s"), instead of the calling thread (0, the default); the JSON
// line reports the training loader's count as "num_workers".
// Flags: --batch-size and --precision (both repeatable: every combination runs; --precision all = every mode),
// --steps, --threads, --data, --strategy, --accelerator, --devices, --cuda-graphs auto|on|off (the JSON says
// how many steps were graph replays, or why none). "speedup_vs_32_true" is the train
// throughput relative to the 32-true run of the same batch size in this invocation (when one ran).
// --repeats N (default 3) trains each configuration N times from the same seed and prints one line for it: the
// median run's figures (by us_per_step; the lower middle one of an even count) with "repeats" and the spread,
// "us_per_step_min"/"_median"/"_max", "train_samples_per_s_min"/"_max" and "eval_samples_per_s_min"/"_max"; the
// same spread goes to stderr as one line of text. The timed regions (the steady-state steps, the validation pass)
// start and end with a device synchronisation, so that queued GPU work is inside them.
// Under `mpirun -np N ... --strategy ddp`, rank 0 prints the global figure (samples of all ranks per second).
// With N > 1 it adds the steady-state gradient-sync split: "grad_sync_wait_us" (the mean wait per rank and step
// for the gradient all-reduce), "grad_sync_collective_us" (the part of the collective not hidden behind backward)
// and "rank_skew_us" (how far apart the ranks reach it); see split_sync_waits.
#include <algorithm>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include <volt/data/data_module.h>
#include "examples/example_common.h"
#include "examples/mnist_models.h"
#include <volt/kernels/threads.h>
#include <volt/runtime/cuda_api.h>
#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/trainer.h>
#include "benchmarks/steady_state.h"

using namespace volt;

namespace {

// 784 -> W -> W -> 10 with ReLU (fused into l1 and l2), cross-entropy, Adam: three GEMMs per pass, two W wide.
struct WideMlp : TrainModule {
  nn::Linear l1, l2, l3;
  double lr;
  WideMlp(int64_t width, double lr_)
      : l1(28 * 28, width, {.activation = Activation::ReLU}),
        l2(width, width, {.activation = Activation::ReLU}),
        l3(width, 10),
        lr(lr_) {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
  }
  std::string type_name() const override { return "WideMlp"; }
  Tensor forward(const Tensor& x) { return l3(l2(l1(x.flatten(1)))); }  // ReLUs fused into l1, l2
  Tensor training_step(const Batch& b, int64_t) override { return cross_entropy(forward(b.input), b.target); }
  bool static_training_step() const override { return true; }
  void validation_step(const Batch& b, int64_t) override { log("val_loss", cross_entropy(forward(b.input), b.target)); }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = lr}); }
};

// The host time of every training batch's end, for the steady-state figure: the first steps pay one-time costs
// (cuBLAS/cuDNN handles, cuDNN's algorithm choice, the graph's warm-up and capture, the allocator's first
// blocks) that a long run amortises; on the CNN they were 0.5 s, a third of a 500-step benchmark.
struct StepClock : Callback {
  // The run's planned steps: the steady-state region starts at the end of step warmup_steps(planned) and ends
  // with the last one; both ends wait for the device first.
  explicit StepClock(int64_t planned_steps) : planned(planned_steps) {}
  int64_t planned;
  std::vector<std::chrono::steady_clock::time_point> ends;
  std::vector<int64_t> samples;  // each batch's size (an epoch's last batch may be short)
  // DDP: the gradient reducer's total wait (GradReducer::wait_stats) at each batch's end, in seconds.
  std::vector<double> sync_wait;
  std::string state_key() const override { return "StepClock"; }
  void on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const Batch& batch, int64_t) override {
    const auto i = static_cast<int64_t>(ends.size());
    if (i == bench::warmup_steps(planned) || i == planned - 1) synchronize(trainer.strategy().root_device());
    ends.push_back(std::chrono::steady_clock::now());
    samples.push_back(batch.size());
    const auto* ddp = dynamic_cast<const DDPStrategy*>(&trainer.strategy());
    if (ddp && ddp->reducer()) sync_wait.push_back(ddp->reducer()->wait_stats().seconds);
  }
  // Each steady-state step's wait for the gradient collectives (after the warm-up), in microseconds.
  std::vector<double> steady_sync_waits_us() const {
    std::vector<double> out;
    if (sync_wait.size() != ends.size()) return out;
    for (size_t i = static_cast<size_t>(warmup()) + 1; i < sync_wait.size(); ++i)
      out.push_back(1e6 * (sync_wait[i] - sync_wait[i - 1]));
    return out;
  }
  // Steps left out as warm-up: a tenth of the run, at least 10, at most half.
  int64_t warmup() const { return bench::warmup_steps(static_cast<int64_t>(ends.size())); }
  // Samples per second after the warm-up: the batches that ended after step w over the time since it ended (0
  // when too few steps ran to tell).
  double steady_samples_per_second() const {
    const int64_t w = warmup(), n = static_cast<int64_t>(ends.size());
    if (n - 1 - w < 1) return 0.0;
    int64_t count = 0;
    for (int64_t i = w + 1; i < n; ++i) count += samples[static_cast<size_t>(i)];
    const double s = std::chrono::duration<double>(ends.back() - ends[static_cast<size_t>(w)]).count();
    return s > 0 ? static_cast<double>(count) / s : 0.0;
  }
};

std::unique_ptr<TrainModule> make_model(const std::string& model, int64_t width) {
  if (model == "wide") return std::make_unique<WideMlp>(width, 1e-4);
  if (model == "cnn") return std::make_unique<examples::MnistCnn>(1e-3);
  return std::make_unique<examples::MnistMlp>(1e-4);
}

// Every rank's steady-state waits on rank 0. A collective: the early returns below take the same branch on
// every rank, since DDP ranks train in lockstep (same steps, same warm-up, a reducer on each).
std::optional<bench::SyncSplit> gather_sync_split(Trainer& trainer, const StepClock& clock) {
  if (trainer.strategy().world_size() < 2 || clock.sync_wait.empty()) return std::nullopt;
  std::vector<double> mine = clock.steady_sync_waits_us();
  if (mine.empty()) return std::nullopt;
  Tensor all = trainer.strategy().all_gather(from_vector<double>(mine)).to(kCPU);
  const int64_t world = all.size(0), steps = all.size(1);
  std::vector<double> flat = all.to_vector<double>();
  std::vector<std::vector<double>> waits(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r)
    waits[static_cast<size_t>(r)].assign(flat.begin() + r * steps, flat.begin() + (r + 1) * steps);
  return bench::split_sync_waits(waits);
}

// printf into a string.
__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) out.append(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
}

// One training run of a configuration: its figures and its JSON line without the closing brace.
struct Run {
  double train_sps = 0, us_per_step = 0, eval_sps = 0;
  std::string json;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batch_sizes{16, 256};
  std::vector<std::string> precisions{"32-true"};
  int64_t steps = 2000, width = 4096;
  int threads = 1, num_workers = 0, repeats = 3;
  std::string data = "/usr/share/datasets/fashion-mnist", strategy = "auto", devices = "auto", accelerator = "cpu",
              model_name = "mlp";
  CLI::App app{"Volt training throughput benchmark"};
  app.add_option("--model", model_name, "mlp (784-128-10) | cnn (examples/mnist_cnn) | wide (784-W-W-10)")
      ->check(CLI::IsMember({"mlp", "cnn", "wide"}));
  app.add_option("--width", width, "hidden width of --model wide")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_sizes, "batch sizes to run (one JSON line each)")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "optimizer steps per configuration")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "runs per configuration (one line: the median run, with min and max)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads per process")->check(CLI::PositiveNumber);
  app.add_option("--num-workers", num_workers,
                 "loader threads assembling the batches, training and validation (0: on the calling thread)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--data", data, "MNIST-format IDX directory");
  app.add_option("--strategy", strategy, "auto | ddp (launch under mpirun)");
  app.add_option("--precision", precisions,
                 "precisions to run: 32-true 16-mixed bf16-mixed 16-true bf16-true 64-true, or all");
  app.add_option("--accelerator", accelerator, "cpu | gpu | auto");
  std::string graphs = "auto";
  app.add_option("--cuda-graphs", graphs,
                 "auto | on | off: capture the training step as a graph and replay it (auto: on a GPU; on: also "
                 "records the CPU step, same results)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--devices", devices, "devices per node");
  std::string benchmark = "off";
  app.add_option("--benchmark", benchmark,
                 "on | off: cuDNN convolution algorithms chosen by timed trials at the first step of each shape (the "
                 "Trainer's `benchmark`), or by cuDNN's heuristics (default)")
      ->check(CLI::IsMember({"on", "off"}));
  std::string small_gemm = "on", tf32 = "off";
  app.add_option("--small-gemm", small_gemm,
                 "on | off: small f32 products on Volt's own CUDA kernel (default) or on cuBLAS (set_cuda_small_gemm)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--tf32", tf32, "on | off: f32 GEMMs on TF32 tensor cores (set_allow_tf32; default off)")
      ->check(CLI::IsMember({"on", "off"}));
  std::string profiler, profile_steps, profiler_dir = "bench_profile";
  double peak_flops = 0;
  app.add_option("--profiler", profiler, "simple | ops | advanced: reports under --profiler-dir")
      ->check(CLI::IsMember({"simple", "ops", "advanced"}));
  app.add_option("--profiler-dir", profiler_dir, "where --profiler writes its reports");
  app.add_option("--profile-steps", profile_steps,
                 "A:B: cudaProfilerStart/Stop around optimizer steps A to B-1 (for nsys/ncu capture ranges)");
  app.add_option("--peak-flops", peak_flops, "peak FLOP/s of one device for MFU (default: known GPUs only)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    if (precisions.size() == 1 && precisions[0] == "all")
      precisions = {"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true"};
    for (std::string& p : precisions) p = precision_name(parse_precision(p));  // errors before any training
    set_num_threads(threads);
    set_cuda_small_gemm(small_gemm == "on");
    set_allow_tf32(tf32 == "on");
    std::map<int64_t, double> fp32_sps;  // batch size -> 32-true train samples/s
    for (const std::string& precision : precisions) {
      for (int64_t bs : batch_sizes) {
        std::vector<Run> runs;
        bool global_zero = false;
        for (int r = 0; r < repeats; ++r) {
          Run run;
          seed_everything(1);
          std::unique_ptr<TrainModule> model = make_model(model_name, width);
          data::MnistDataModule dm(data, bs, num_workers, 1, /*pin_memory=*/true, /*shuffle_train=*/false);
          auto clock = std::make_shared<StepClock>(steps);
          auto tp = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.peak_flops = peak_flops});
          Trainer trainer({.accelerator = accelerator, .devices = devices, .strategy = strategy,
                           .precision = precision, .max_steps = steps, .limit_val_batches = 0,
                           .num_sanity_val_steps = 0, .benchmark = benchmark == "on",
                           .cuda_graphs = graphs == "on"    ? CudaGraphs::on
                                          : graphs == "off" ? CudaGraphs::off
                                                            : CudaGraphs::automatic,
                           .enable_progress_bar = false, .enable_model_summary = false,
                           .enable_checkpointing = false, .logger = false, .callbacks = {tp, clock},
                           .profiler = profiler, .profiler_dir = profiler_dir, .profile_steps = profile_steps});
          reset_peak_memory_stats(trainer.strategy().root_device());
          trainer.fit(*model, dm);
          const std::optional<bench::SyncSplit> sync = gather_sync_split(trainer, *clock);
          const int loader_workers = dm.train_dataloader()->options().num_workers;  // what the loaders were given
          const double peak_tensor_mb = memory_stats(model->device()).peak_allocated / 1e6;
          // Evaluation throughput: a full pass over the validation split (5,000 images) by a second Trainer.
          Trainer evaluator({.accelerator = accelerator, .devices = devices, .strategy = strategy,
                             .precision = precision, .enable_progress_bar = false, .enable_model_summary = false,
                             .enable_checkpointing = false, .logger = false});
          auto val = dm.val_dataloader();
          synchronize(model->device());
          auto t0 = std::chrono::steady_clock::now();
          evaluator.validate(*model, val);
          synchronize(model->device());
          double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const int world = trainer.strategy().world_size();
          // Every rank trains the same number of samples in lockstep: the global rate is world x the local one.
          // Steady state (after the warm-up steps); the whole run's rate, warm-up included, is reported beside it.
          const double whole_sps = tp->samples_per_second();
          const double steady_sps = clock->steady_samples_per_second();
          const double local_sps = steady_sps > 0 ? steady_sps : whole_sps;
          double train_sps = local_sps * world;
          const double us_per_step = local_sps > 0 ? 1e6 * static_cast<double>(bs) / local_sps : 0.0;
          const double us_per_step_whole = whole_sps > 0 ? 1e6 * static_cast<double>(bs) / whole_sps : 0.0;
          double eval_sps = static_cast<double>(val->dataset()->size()) / eval_s;
          run.train_sps = train_sps;
          run.us_per_step = us_per_step;
          run.eval_sps = eval_sps;
          global_zero = trainer.strategy().is_global_zero();
          if (global_zero) {
            std::string& out = run.json;
            appendf(out,
                    "{\"bench\":\"train\",\"model\":\"%s\",\"width\":%lld,\"batch_size\":%lld,\"threads\":%d,"
                    "\"steps\":%lld,\"world_size\":%d,\"strategy\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\","
                    "\"train_samples_per_s\":%.1f,\"us_per_step\":%.1f,\"eval_samples_per_s\":%.1f,"
                    "\"peak_rss_mb\":%.1f,\"peak_tensor_mb\":%.2f",
                    model_name.c_str(),
                    static_cast<long long>(model_name == "wide" ? width : model_name == "mlp" ? 128 : 0),
                    static_cast<long long>(bs), threads, static_cast<long long>(steps), world, strategy.c_str(),
                    model->device().str().c_str(), precision.c_str(), train_sps, us_per_step, eval_sps,
                    examples::peak_rss_bytes() / 1e6, peak_tensor_mb);
            appendf(out,
                    ",\"warmup_steps\":%lld,\"us_per_step_with_warmup\":%.1f,\"benchmark\":\"%s\","
                    "\"small_gemm\":\"%s\",\"tf32\":\"%s\",\"num_workers\":%d",
                    static_cast<long long>(clock->warmup()), us_per_step_whole, benchmark.c_str(), small_gemm.c_str(),
                    tf32.c_str(), loader_workers);
            // DDP over several ranks: the steady-state wait for the gradient collectives, split into the
            // collective's own time and the ranks' skew (see split_sync_waits).
            if (sync)
              appendf(out, ",\"grad_sync_wait_us\":%.1f,\"grad_sync_collective_us\":%.1f,\"rank_skew_us\":%.1f",
                      sync->wait_us, sync->collective_us, sync->skew_us);
            // Whether the step ran as a captured graph: its replays and nodes, or why not.
            const StepGraph& sg = trainer.step_graph();
            appendf(out, ",\"cuda_graphs\":\"%s\",\"graph_replays\":%lld,\"graph_nodes\":%zu", graphs.c_str(),
                    static_cast<long long>(sg.replays()), sg.num_nodes());
            if (!sg.disabled_reason().empty()) {
              std::string why = sg.disabled_reason();
              std::replace(why.begin(), why.end(), '"', '\'');
              appendf(out, ",\"eager_because\":\"%s\"", why.c_str());
            }
            // GEMM FLOP/s of the last logging window (50 steps) and, with a known peak, the model FLOPs
            // utilisation.
            const auto& last = tp->last_metrics();
            if (last.count("throughput/device/flops_per_sec"))
              appendf(out, ",\"device_gflops_per_s\":%.2f", last.at("throughput/device/flops_per_sec") / 1e9);
            if (last.count("throughput/device/mfu"))
              appendf(out, ",\"mfu\":%.4f", last.at("throughput/device/mfu"));
          }
          runs.push_back(std::move(run));
        }
        // The median run by step time (the lower middle one of an even count), and the spread of all runs.
        std::vector<Run> sorted = runs;
        std::sort(sorted.begin(), sorted.end(),
                  [](const Run& a, const Run& b) { return a.us_per_step < b.us_per_step; });
        const Run& median = sorted[(sorted.size() - 1) / 2];
        if (precision == "32-true") fp32_sps[bs] = median.train_sps;
        if (global_zero) {
          auto [sps_lo, sps_hi] = std::minmax_element(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
            return a.train_sps < b.train_sps;
          });
          auto [eval_lo, eval_hi] = std::minmax_element(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
            return a.eval_sps < b.eval_sps;
          });
          std::string out = median.json;
          if (fp32_sps.count(bs)) appendf(out, ",\"speedup_vs_32_true\":%.3f", median.train_sps / fp32_sps[bs]);
          appendf(out,
                  ",\"repeats\":%d,\"us_per_step_min\":%.1f,\"us_per_step_median\":%.1f,\"us_per_step_max\":%.1f,"
                  "\"train_samples_per_s_min\":%.1f,\"train_samples_per_s_max\":%.1f,"
                  "\"eval_samples_per_s_min\":%.1f,\"eval_samples_per_s_max\":%.1f}",
                  repeats, sorted.front().us_per_step, median.us_per_step, sorted.back().us_per_step,
                  sps_lo->train_sps, sps_hi->train_sps, eval_lo->eval_sps, eval_hi->eval_sps);
          std::printf("%s\n", out.c_str());
          std::fflush(stdout);
          std::fprintf(stderr,
                       "bench_train: %s batch %lld %s, %d run(s): us_per_step min %.1f median %.1f max %.1f\n",
                       model_name.c_str(), static_cast<long long>(bs), precision.c_str(), repeats,
                       sorted.front().us_per_step, median.us_per_step, sorted.back().us_per_step);
        }
      }
    }
  } catch (const Error& e) {
    std::cerr << "bench_train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
