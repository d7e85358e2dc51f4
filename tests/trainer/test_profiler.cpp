// The Trainer's profilers (trainer/profilers/profiler.h), the trace recorder they sit on (runtime/trace.h), memory reports
// and the ThroughputMonitor's FLOP/MFU metrics.
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include <volt/runtime/allocator.h>
#include <volt/runtime/autocast.h>
#include <volt/trainer/manual_optimizer.h>
#include <volt/trainer/callbacks/throughput_monitor.h>
#include "trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {

// x (B, 8) -> Linear(8, 16) -> relu -> Linear(16, 1) -> MSE against y (B). training_step can sleep, so that the
// profiler's table has a known share to account for.
struct TwoLayer : TrainModule {
  nn::Linear l1{8, 16}, l2{16, 1};
  int sleep_ms = 0;
  TwoLayer() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  std::string type_name() const override { return "TwoLayer"; }
  Tensor training_step(const Batch& b, int64_t) override {
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    Tensor out = l2(l1(b.input).relu()).reshape({-1});
    return mse_loss(out, b.target);
  }
  void validation_step(const Batch& b, int64_t) override {
    log("val_loss", mse_loss(l2(l1(b.input).relu()).reshape({-1}), b.target));
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.01}); }
};

std::shared_ptr<data::DataLoader> loader8(int64_t n, int64_t batch) {
  return std::make_shared<data::DataLoader>(make_dataset(n, 8), data::DataLoaderOptions{.batch_size = batch});
}

// Options for a fit of `max_steps` steps under profiler `kind`, limited to the window `steps` ("" = none).
TrainerOptions profiled(const ScratchDir& dir, const std::string& kind, int64_t max_steps, const std::string& steps = "") {
  auto o = quiet(dir.str());
  o.max_steps = max_steps;
  o.profiler = kind;
  o.profile_steps = steps;
  return o;
}

// fit with stdout captured (the profiler prints its tables there); returns what was printed.
std::string fit_captured(Trainer& t, TrainModule& m, std::shared_ptr<data::DataLoader> train,
                         const std::string& ckpt_path = "") {
  ::testing::internal::CaptureStdout();
  t.fit(m, std::move(train), nullptr, ckpt_path);
  return ::testing::internal::GetCapturedStdout();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Records begin/end pairs as text.
struct ListRecorder : trace::Recorder {
  std::vector<std::string> events;
  void begin(trace::Layer layer, std::string_view name, const trace::RangeInfo& info) override {
    events.push_back(std::string("begin ") + trace::layer_name(layer) + " " + std::string(name) +
                     (info.bytes ? " bytes=" + std::to_string(info.bytes) : ""));
  }
  void end(trace::Layer layer) override { events.push_back(std::string("end ") + trace::layer_name(layer)); }
  void mark(trace::Layer layer, std::string_view name) override {
    events.push_back(std::string("mark ") + trace::layer_name(layer) + " " + std::string(name));
  }
};

struct RecorderScope {
  explicit RecorderScope(trace::Recorder* r) { trace::set_recorder(r); }
  ~RecorderScope() { trace::set_recorder(nullptr); }
};

}  // namespace

TEST(Trace, RangesReachTheRecorderNestedAndNamesAreLazy) {
  int built = 0;
  {
    trace::Range r(trace::Layer::trainer, [&] {
      ++built;
      return std::string("never");
    });
  }
  if (!trace::nvtx_attached()) EXPECT_EQ(built, 0) << "a name was built with nothing listening";
  ListRecorder rec;
  {
    RecorderScope scope(&rec);
    EXPECT_TRUE(trace::active());
    trace::Range outer(trace::Layer::trainer, "outer");
    {
      trace::Range inner(trace::Layer::comm, "all_reduce", {kCPU, 4096});
      trace::mark(trace::Layer::trainer, "here");
    }
    trace::Range lazy(trace::Layer::op, [&] {
      ++built;
      return std::string("lazy");
    });
  }
  EXPECT_FALSE(trace::active() && !trace::nvtx_attached());
  const std::vector<std::string> want{"begin trainer outer", "begin comm all_reduce bytes=4096", "mark trainer here",
                                      "end comm",            "begin op lazy",                    "end op",
                                      "end trainer"};
  EXPECT_EQ(rec.events, want);
  EXPECT_GE(built, 1);
}

TEST(Trace, ModuleForwardAndBackwardRangesNameTheModule) {
  manual_seed(1);
  TwoLayer m;
  ListRecorder rec;
  {
    RecorderScope scope(&rec);
    Tensor x = randn({4, 8});
    Tensor loss = m.l2(m.l1(x).relu()).sum();
    EXPECT_EQ(trace::current_module(), "");
    loss.backward();
  }
  auto has = [&](const std::string& e) { return std::find(rec.events.begin(), rec.events.end(), e) != rec.events.end(); };
  EXPECT_TRUE(has("begin module l1 (Linear)"));
  EXPECT_TRUE(has("begin module l2 (Linear)"));
  EXPECT_TRUE(has("begin op linear"));
  EXPECT_TRUE(has("begin kernel gemm"));
  EXPECT_TRUE(has("begin module l2 (Linear).backward"));
  EXPECT_TRUE(has("begin module l1 (Linear).backward"));
  // Backward runs l2's nodes before l1's.
  auto pos = [&](const std::string& e) { return std::find(rec.events.begin(), rec.events.end(), e) - rec.events.begin(); };
  EXPECT_LT(pos("begin module l2 (Linear).backward"), pos("begin module l1 (Linear).backward"));
  // Balanced: as many ends as begins.
  int depth = 0;
  for (const auto& e : rec.events) {
    if (e.rfind("begin ", 0) == 0) ++depth;
    if (e.rfind("end ", 0) == 0) --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
}

TEST(Trace, FlopCounterCountsGemmsOfForwardAndBackward) {
  manual_seed(2);
  nn::Linear l1(8, 16), l2(16, 4);
  Tensor x = randn({32, 8});
  const uint64_t before = trace::flops_counted();
  Tensor loss = l2(l1(x).relu()).sum();
  const uint64_t fwd = trace::flops_counted() - before;
  EXPECT_EQ(fwd, 2u * 32 * 8 * 16 + 2u * 32 * 16 * 4);
  loss.backward();
  // Backward: l2's input and weight gradients, l1's weight gradient (x needs none).
  EXPECT_EQ(trace::flops_counted() - before, fwd + 2u * (2u * 32 * 16 * 4) + 2u * 32 * 8 * 16);
}

TEST(Profiler, ParsesOptions) {
  EXPECT_EQ(parse_profiler(""), ProfilerKind::none);
  EXPECT_EQ(parse_profiler("simple"), ProfilerKind::simple);
  EXPECT_EQ(parse_profiler("ops"), ProfilerKind::ops);
  EXPECT_EQ(parse_profiler("advanced"), ProfilerKind::advanced);
  EXPECT_THROW(parse_profiler("pytorch"), Error);
  EXPECT_EQ(parse_profile_steps(""), std::make_pair(int64_t{-1}, int64_t{-1}));
  EXPECT_EQ(parse_profile_steps("3:7"), std::make_pair(int64_t{3}, int64_t{7}));
  for (const char* bad : {"3", "7:3", "3:3", "-1:2", "a:b", "1:2:3", ":4"}) {
    try {
      parse_profile_steps(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("profile_steps"), std::string::npos) << e.what();
    }
  }
  ScratchDir dir("profiler_opts");
  auto o = quiet(dir.str());
  o.profiler = "cprofile";
  EXPECT_THROW(Trainer t(o), Error);
  o.profiler = "simple";
  o.profile_steps = "5:2";
  EXPECT_THROW(Trainer t(o), Error);
}

TEST(Profiler, SimpleTableAccountsForTheWallTime) {
  ScratchDir dir("profiler_simple");
  manual_seed(3);
  TwoLayer m;
  m.sleep_ms = 4;
  auto o = quiet(dir.str());
  o.max_steps = 25;
  o.profiler = "simple";
  Trainer t(o);
  ::testing::internal::CaptureStdout();
  const auto t0 = std::chrono::steady_clock::now();
  t.fit(m, loader8(400, 16), loader8(64, 16));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = ::testing::internal::GetCapturedStdout();
  Profiler& p = *t.profiler();
  // The stage's wall time is fit's, and the outermost actions cover it.
  EXPECT_NEAR(p.wall_seconds(), wall, 0.03 * wall + 0.02);  // the slack covers fit's work before the profiler starts on a loaded machine
  EXPECT_LT(p.unaccounted_seconds(), 0.05 * p.wall_seconds()) << p.simple_table();
  const auto rows = p.action_stats();
  const ProfileStat* step = find_stat(rows, "trainer", "[TrainModule]training_step");
  ASSERT_NE(step, nullptr) << p.simple_table();
  EXPECT_EQ(step->calls, 25);
  EXPECT_GE(step->total_s, 25 * 0.004);
  EXPECT_LE(step->min_s, step->mean_s());
  EXPECT_GE(step->max_s, step->mean_s());
  const ProfileStat* batch = find_stat(rows, "trainer", "run_training_batch");
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->calls, 25);
  EXPECT_GE(batch->total_s, step->total_s);
  for (const char* name : {"run_training_epoch", "[Trainer]setup", "[Strategy]backward", "optimizer_step",
                           "[Optimizer]SGD.step", "[DataLoader]train_next", "[Batch]to_device", "run_validation",
                           "[TrainModule]validation_step", "[Trainer]teardown"}) {
    bool found = false;
    for (const auto& r : rows) found = found || r.name == name;
    EXPECT_TRUE(found) << name << " missing from\n" << p.simple_table();
  }
  // No op-level rows in the simple profiler.
  EXPECT_TRUE(p.op_stats().empty());
  // Printed on rank 0 and written to <log_dir>/profiler/fit-simple.txt.
  EXPECT_NE(out.find("Profiler report: fit"), std::string::npos) << out;
  EXPECT_NE(out.find("[TrainModule]training_step"), std::string::npos);
  const std::string file = t.profiler_output_dir() + "/fit-simple.txt";
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  EXPECT_NE(slurp(file).find("run_training_batch"), std::string::npos);
  EXPECT_EQ(t.profiler_output_dir(), t.log_dir() + "/profiler");
}

TEST(Profiler, OpsProfilerWritesCsvAndANestedChromeTrace) {
  ScratchDir dir("profiler_ops");
  manual_seed(4);
  TwoLayer m;
  auto o = profiled(dir, "ops", 6);
  o.profiler_dir = dir.str() + "/prof";
  Trainer t(o);
  const std::string out = fit_captured(t, m, loader8(96, 16));
  EXPECT_NE(out.find("Op profile: fit"), std::string::npos) << out;
  Profiler& p = *t.profiler();
  const auto ops = p.op_stats();
  const ProfileStat* linear = find_stat(ops, "op", "linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->calls, 12);  // two layers x six steps
  const ProfileStat* gemm = find_stat(ops, "kernel", "gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->calls, 6 * 1);    // backward: l2's dx
  EXPECT_LT(gemm->gpu_total_s, 0);  // no GPU timing on the CPU
  const ProfileStat* bgrad = find_stat(ops, "kernel", "gemm_bgrad");  // each layer's dw with its db
  ASSERT_NE(bgrad, nullptr);
  EXPECT_EQ(bgrad->calls, 6 * 2);
  const ProfileStat* fwd = find_stat(ops, "kernel", "linear_act_fwd");  // the forward's GEMM with its bias
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->calls, 6 * 2);
  ASSERT_NE(find_stat(ops, "module", "l1 (Linear)"), nullptr);
  ASSERT_NE(find_stat(ops, "module", "l2 (Linear).backward"), nullptr);

  const std::string csv = slurp(dir.str() + "/prof/fit-ops.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "layer,name,calls,total_ms,mean_us,min_us,max_us,gpu_total_ms,gpu_mean_us");
  EXPECT_NE(csv.find("\nop,linear,12,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nkernel,gemm,6,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nkernel,gemm_bgrad,12,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nkernel,linear_act_fwd,12,"), std::string::npos) << csv;

  const auto trace = nlohmann::json::parse(slurp(dir.str() + "/prof/fit-trace.json"));
  const auto& events = trace.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  // Per thread: ordered by start, and every range lies inside the ranges still open when it starts.
  std::map<int64_t, std::vector<std::pair<double, double>>> open;
  std::map<int64_t, double> last_ts;
  int complete = 0, linear_events = 0;
  for (const auto& e : events) {
    if (e.at("ph") != "X") continue;
    ++complete;
    const int64_t tid = e.at("tid").get<int64_t>();
    const double ts = e.at("ts").get<double>(), end = ts + e.at("dur").get<double>();
    EXPECT_GE(ts, last_ts[tid]);
    last_ts[tid] = ts;
    auto& stack = open[tid];
    while (!stack.empty() && stack.back().second <= ts) stack.pop_back();
    if (!stack.empty()) EXPECT_LE(end, stack.back().second + 1e-3) << e.dump();
    stack.push_back({ts, end});
    if (e.at("name") == "linear") {
      ++linear_events;
      EXPECT_EQ(e.at("cat"), "op");
      EXPECT_GE(stack.size(), 3u) << "linear should run inside a module inside a training step";
    }
  }
  EXPECT_GT(complete, 100);
  EXPECT_EQ(linear_events, 12);
}

TEST(Profiler, ProfileStepsLimitsOpRecordingAndMarksTheWindow) {
  ScratchDir dir("profiler_window");
  manual_seed(5);
  TwoLayer m;
  Trainer t(profiled(dir, "advanced", 6, "2:4"));
  fit_captured(t, m, loader8(96, 16));
  Profiler& p = *t.profiler();
  const auto ops = p.op_stats(), actions = p.action_stats();
  const ProfileStat* linear = find_stat(ops, "op", "linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->calls, 4);  // steps 2 and 3 only
  const ProfileStat* step = find_stat(actions, "trainer", "[TrainModule]training_step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->calls, 6);  // the hook table covers the whole fit
  // The trace holds the cudaProfilerStart/Stop marks around the window's two batches.
  const auto trace = nlohmann::json::parse(slurp(t.profiler_output_dir() + "/fit-trace.json"));
  std::vector<std::string> seq;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "i" || (e.at("ph") == "X" && e.at("name") == "run_training_batch"))
      seq.push_back(e.at("name").get<std::string>());
  const std::vector<std::string> want{"run_training_batch", "run_training_batch", "cudaProfilerStart",
                                      "run_training_batch", "run_training_batch", "cudaProfilerStop",
                                      "run_training_batch", "run_training_batch"};
  EXPECT_EQ(seq, want);
}

TEST(Profiler, FailedFitRemovesTheRecorder) {
  ScratchDir dir("profiler_fail");
  TwoLayer m;
  auto o = quiet(dir.str());
  o.max_steps = 3;
  o.profiler = "simple";
  Trainer t(o);
  auto bad = std::make_shared<data::DataLoader>(make_dataset(32, 5), data::DataLoaderOptions{.batch_size = 8});
  EXPECT_THROW(t.fit(m, bad), Error);  // 5 features into Linear(8, ...)
  EXPECT_EQ(trace::recorder(), nullptr);
}

TEST(Trace, RecorderLayersAreMaskedAndARangeOutlivesItsRecorder) {
  auto* rec = new ListRecorder;
  trace::set_recorder(rec, trace::layer_mask({trace::Layer::trainer}));
  int built = 0;
  {
    trace::Range op(trace::Layer::op, [&] {
      ++built;
      return std::string("masked");
    });
  }
  EXPECT_TRUE(trace::active(trace::Layer::trainer));
  if (!trace::nvtx_attached()) {
    EXPECT_FALSE(trace::active(trace::Layer::op));
    EXPECT_EQ(built, 0) << "an op range was begun although the recorder did not ask for ops";
  }
  trace::set_recorder_layers(rec, trace::kAllLayers);
  EXPECT_TRUE(trace::active(trace::Layer::op));
  // A loader worker's range begins while the recorder is installed and ends after it was removed and freed:
  // the end must not reach the freed recorder (AddressSanitizer checks this run).
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;
  std::thread worker([&] {
    trace::Range r(trace::Layer::data, "worker batch");
    std::unique_lock<std::mutex> lock(mu);
    phase = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return phase == 2; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return phase == 1; });
  }
  trace::set_recorder(nullptr);
  const std::vector<std::string> seen = rec->events;
  delete rec;
  {
    std::lock_guard<std::mutex> lock(mu);
    phase = 2;
  }
  cv.notify_all();
  worker.join();
  EXPECT_EQ(seen, std::vector<std::string>{"begin data worker batch"});
  EXPECT_FALSE(trace::active(trace::Layer::data) && !trace::nvtx_attached());
}

TEST(Trace, ARecorderThatThrowsOnlyMissesTheRange) {
  struct Throwing : trace::Recorder {
    int ends = 0;
    void begin(trace::Layer, std::string_view, const trace::RangeInfo&) override { throw std::bad_alloc(); }
    void end(trace::Layer) override { ++ends; }
  } rec;
  RecorderScope scope(&rec);
  EXPECT_NO_THROW({ trace::Range r(trace::Layer::trainer, "x"); });
  EXPECT_EQ(rec.ends, 0);
}

TEST(Profiler, AnOpThatDispatchesToItselfCountsOnce) {
  Profiler p(ProfilerKind::ops);
  p.start("fit");
  {
    trace::Range outer(trace::Layer::op, "linear");
    trace::Range inner(trace::Layer::op, "linear");  // e.g. linear's autocast path calling linear again
    trace::Range k(trace::Layer::kernel, "gemm");
  }
  {
    trace::Range sync(trace::Layer::comm, "all_reduce", {kCPU, 64});
    trace::Range nested(trace::Layer::comm, "all_reduce", {kCPU, 64});
  }
  {
    // The real thing: linear under bf16 autocast casts and calls itself.
    manual_seed(2);
    Tensor x = randn({4, 8}), w = randn({3, 8}), b = randn({3});
    AutocastGuard ac(true, DType::bf16);
    linear(x, w, b);
  }
  p.stop();
  const auto ops = p.op_stats(), actions = p.action_stats();
  const ProfileStat* lin = find_stat(ops, "op", "linear");
  ASSERT_NE(lin, nullptr);
  EXPECT_EQ(lin->calls, 2);
  const ProfileStat* ar = find_stat(actions, "comm", "all_reduce");
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->calls, 1);
  int linear_events = 0;
  const auto trace = nlohmann::json::parse(p.chrome_trace_json());
  for (const auto& e : trace.at("traceEvents")) linear_events += e.at("name") == "linear";
  EXPECT_EQ(linear_events, 2);
}

TEST(Profiler, SimpleProfilerAndClosedWindowsAskForNoOpRanges) {
  if (trace::nvtx_attached()) GTEST_SKIP() << "an NVTX tool makes every layer active";
  Profiler simple(ProfilerKind::simple);
  simple.start("fit");
  EXPECT_TRUE(trace::active(trace::Layer::trainer));
  EXPECT_TRUE(trace::active(trace::Layer::comm));
  EXPECT_FALSE(trace::active(trace::Layer::op));
  EXPECT_FALSE(trace::active(trace::Layer::kernel));
  simple.stop();
  Profiler ops(ProfilerKind::ops);
  ops.start("fit", /*op_window=*/false);
  EXPECT_FALSE(trace::active(trace::Layer::module));
  ops.set_op_window(true);
  EXPECT_TRUE(trace::active(trace::Layer::module));
  EXPECT_TRUE(trace::active(trace::Layer::backward));
  ops.set_op_window(false);
  EXPECT_FALSE(trace::active(trace::Layer::op));
  ops.stop();
  EXPECT_FALSE(trace::active());
}

TEST(Profiler, AResumedRunPastTheWindowNeverOpensIt) {
  ScratchDir dir("profiler_window_resume");
  manual_seed(6);
  const std::string stem = dir.str() + "/at6";
  {
    TwoLayer m;
    auto o = quiet(dir.str());
    o.max_steps = 6;
    Trainer t(o);
    t.fit(m, loader8(96, 16));
    t.save_checkpoint(stem);
  }
  TwoLayer m;
  Trainer t(profiled(dir, "ops", 8, "2:4"));
  fit_captured(t, m, loader8(96, 16), stem + ".json");
  EXPECT_EQ(t.global_step(), 8);
  const auto ops = t.profiler()->op_stats();
  EXPECT_EQ(find_stat(ops, "op", "linear"), nullptr) << t.profiler()->ops_table();
  const std::string trace = slurp(t.profiler_output_dir() + "/fit-trace.json");
  EXPECT_EQ(trace.find("cudaProfilerStart"), std::string::npos);
}

TEST(Profiler, AFitFailingInsideTheWindowClosesItAndDropsTheRecords) {
  struct Failing : TwoLayer {
    Tensor training_step(const Batch& b, int64_t idx) override {
      if (idx == 3) throw Error("training_step failed on purpose");
      return TwoLayer::training_step(b, idx);
    }
  } m;
  ScratchDir dir("profiler_fail_window");
  Trainer t(profiled(dir, "ops", 6, "1:5"));
  EXPECT_THROW(t.fit(m, loader8(96, 16)), Error);
  EXPECT_EQ(trace::recorder(), nullptr);
  EXPECT_FALSE(t.profiler()->running());
  if (!trace::nvtx_attached()) EXPECT_FALSE(trace::active());
  EXPECT_FALSE(std::filesystem::exists(t.profiler_output_dir() + "/fit-trace.json"));
}

TEST(Profiler, AnUnwritableReportDirectoryCostsAWarningNotTheRun) {
  ScratchDir dir("profiler_unwritable");
  TwoLayer m;
  auto o = profiled(dir, "simple", 2);
  o.profiler_dir = "/dev/null/prof";
  Trainer t(o);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(fit_captured(t, m, loader8(32, 16)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(t.global_step(), 2);
  EXPECT_NE(err.find("profiler reports were not written"), std::string::npos) << err;
  EXPECT_NE(err.find("/dev/null/prof"), std::string::npos) << err;
}

TEST(MemoryReport, NamesEveryDeviceWithItsFigures) {
  Tensor keep = zeros({1024, 256});  // 1 MB alive
  const std::string r = memory_report({kCPU});
  EXPECT_EQ(r.rfind("cpu: ", 0), 0u) << r;
  EXPECT_NE(r.find(" MB allocated, "), std::string::npos) << r;
  EXPECT_NE(r.find(" MB reserved, "), std::string::npos) << r;
  EXPECT_NE(r.find(" MB peak"), std::string::npos) << r;
  const MemoryStats s = memory_stats(kCPU);
  char want[64];
  std::snprintf(want, sizeof want, "cpu: %.1f MB allocated", s.allocated / (1024.0 * 1024.0));
  EXPECT_EQ(r.substr(0, std::string(want).size()), want);
  ScratchDir dir("memory_summary");
  TwoLayer m;
  auto o = quiet(dir.str());
  o.max_steps = 2;
  o.enable_model_summary = true;
  Trainer t(o);
  ::testing::internal::CaptureStdout();
  t.fit(m, loader8(32, 16));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Memory: cpu: "), std::string::npos) << out;
  EXPECT_NE(out.find("Memory at the end of fit: cpu: "), std::string::npos) << out;
}

TEST(ThroughputMonitor, PeakTable) {
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA H100 80GB HBM3", DType::bf16), 989.4e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA H100 PCIe", DType::f16), 756e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA A100-SXM4-80GB", DType::f32, /*tf32=*/true), 156e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA A100-SXM4-80GB", DType::f32), 19.5e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA L40S", DType::bf16), 362e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA L4", DType::bf16), 121e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("Some CPU", DType::f32), 0.0);
  // Whole model words only: other models whose names contain a known one have no (wrong) peak.
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA L40", DType::bf16), 0.0);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA A10G", DType::bf16), 0.0);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA A10", DType::bf16), 125e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA H100 NVL", DType::bf16), 0.0);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA GH200 480GB", DType::bf16), 989.4e12);
  EXPECT_DOUBLE_EQ(device_peak_flops("NVIDIA H100 80GB HBM3", DType::i64), 0.0);
  EXPECT_THROW(ThroughputMonitor(ThroughputMonitorOptions{.peak_flops = -1}), Error);
}

TEST(ThroughputMonitor, LogsSamplesFlopsAndMfu) {
  ScratchDir dir("throughput");
  manual_seed(6);
  TwoLayer m;
  auto tp = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{.peak_flops = 1e9});
  auto o = quiet(dir.str());
  o.max_steps = 10;
  o.log_every_n_steps = 5;
  o.callbacks = {tp};
  Trainer t(o);
  const uint64_t before = trace::flops_counted();
  t.fit(m, loader8(320, 32));
  // Per step at batch 32: forward l1 + l2, backward l2 (input and weight) + l1 (weight).
  const uint64_t per_step = 2 * (2 * 32 * 8 * 16) + 3 * (2 * 32 * 16 * 1);
  EXPECT_EQ(trace::flops_counted() - before, 10 * per_step);
  const auto& last = tp->last_metrics();
  ASSERT_TRUE(last.count("throughput/device/flops_per_sec")) << "nothing logged";
  const double sps = last.at("throughput/device/samples_per_sec");
  EXPECT_GT(sps, 0);
  EXPECT_DOUBLE_EQ(last.at("throughput/samples_per_sec"), sps);  // one rank
  EXPECT_DOUBLE_EQ(last.at("throughput/device/batches_per_sec"), sps / 32);
  // FLOPs per sample x samples per second.
  EXPECT_NEAR(last.at("throughput/device/flops_per_sec"), sps * per_step / 32.0,
              1e-9 * last.at("throughput/device/flops_per_sec"));
  EXPECT_DOUBLE_EQ(last.at("throughput/device/mfu"), last.at("throughput/device/flops_per_sec") / 1e9);
  EXPECT_DOUBLE_EQ(tp->peak_flops(), 1e9);
  // The same values reached the logger.
  const Csv csv = read_csv(t.log_dir() + "/metrics.csv");
  EXPECT_NE(std::find(csv.header.begin(), csv.header.end(), "throughput/device/mfu"), csv.header.end());
  EXPECT_DOUBLE_EQ(t.logged_metrics().at("throughput/device/mfu"), last.at("throughput/device/mfu"));
}

TEST(ThroughputMonitor, CountsTokensAndUsesTheModelsOwnFlops) {
  // length_fn: 5 "tokens" per sample; flops_per_sample replaces the traced GEMMs for flops_per_sec and MFU.
  ScratchDir dir("throughput_tokens");
  manual_seed(6);
  TwoLayer m;
  auto tp = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{
      .peak_flops = 1e9, .length_fn = [](const Batch& b) { return 5 * b.size(); }, .flops_per_sample = 1234.0});
  auto o = quiet(dir.str());
  o.max_steps = 10;
  o.log_every_n_steps = 5;
  o.callbacks = {tp};
  Trainer t(o);
  t.fit(m, loader8(320, 32));
  EXPECT_EQ(tp->samples(), 320);
  EXPECT_EQ(tp->tokens(), 5 * 320);
  EXPECT_DOUBLE_EQ(tp->tokens_per_second(), 5 * tp->samples_per_second());
  const auto& last = tp->last_metrics();
  ASSERT_TRUE(last.count("throughput/device/tokens_per_sec")) << "nothing logged";
  const double sps = last.at("throughput/device/samples_per_sec");
  EXPECT_DOUBLE_EQ(last.at("throughput/device/tokens_per_sec"), 5 * sps);
  EXPECT_DOUBLE_EQ(last.at("throughput/tokens_per_sec"), 5 * sps);  // one rank
  EXPECT_NEAR(last.at("throughput/device/flops_per_sec"), 1234.0 * sps, 1e-12 * 1234.0 * sps);
  EXPECT_DOUBLE_EQ(last.at("throughput/device/mfu"), last.at("throughput/device/flops_per_sec") / 1e9);
  // The totals survive a checkpoint round trip, and an older record without "tokens" loads as 0 tokens.
  ThroughputMonitor back;
  back.load_state_dict(tp->state_dict());
  EXPECT_EQ(back.tokens(), 5 * 320);
  back.load_state_dict({{"samples", 7}, {"seconds", 1.0}});
  EXPECT_EQ(back.tokens(), 0);
  VOLT_EXPECT_ERROR(back.load_state_dict({{"samples", 7}, {"tokens", -3}, {"seconds", 1.0}}),
                    "\"tokens\" must be an integer >= 0");
  VOLT_EXPECT_ERROR(ThroughputMonitor(ThroughputMonitorOptions{.flops_per_sample = -1}),
                    "flops_per_sample=-1 must be a finite number >= 0");
}

TEST(ThroughputMonitor, ANegativeLengthIsAnError) {
  ScratchDir dir("throughput_negative");
  TwoLayer m;
  auto tp = std::make_shared<ThroughputMonitor>(
      ThroughputMonitorOptions{.length_fn = [](const Batch&) { return int64_t{-1}; }});
  auto o = quiet(dir.str());
  o.max_steps = 2;
  o.callbacks = {tp};
  Trainer t(o);
  VOLT_EXPECT_ERROR(t.fit(m, loader8(64, 32)), "ThroughputMonitor: length_fn returned -1 for a batch of 32");
}

TEST(Trainer, SteppedLastBatchFollowsTheStepCounterUnderManualOptimisation) {
  // Manual optimisation stepping every other batch: callbacks (ThroughputMonitor) see a step only then.
  struct EveryOther : TwoLayer {
    EveryOther() { automatic_optimization = false; }
    Tensor training_step(const Batch& b, int64_t idx) override {
      Tensor loss = TwoLayer::training_step(b, idx);
      manual_backward(loss);
      if (idx % 2 == 1) {
        optimizers()[0].step();
        optimizers()[0].zero_grad();
      }
      return loss;
    }
  } m;
  struct Seen : Callback {
    std::vector<bool> stepped;
    void on_train_batch_end(Trainer& t, TrainModule&, const Tensor&, const Batch&, int64_t) override {
      stepped.push_back(t.stepped_last_batch());
    }
  };
  auto seen = std::make_shared<Seen>();
  ScratchDir dir("stepped_manual");
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.callbacks = {seen};
  Trainer t(o);
  t.fit(m, loader8(96, 16));
  EXPECT_EQ(t.global_step(), 3);
  EXPECT_EQ(seen->stepped, (std::vector<bool>{false, true, false, true, false, true}));
}
