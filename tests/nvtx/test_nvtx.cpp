// NVTX ranges of a training step, seen by a tool: this binary runs with NVTX_INJECTION64_PATH pointing at
// tests/nvtx/nvtx_stub.cpp's library (set by CTest), which NVTX loads exactly as it loads Nsight's injection.
// CUDA-enabled builds only (CPU-only builds compile NVTX out); no GPU needed.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <volt/distributed/process_group.h>
#include <volt/nn/nn.h>
#include <volt/runtime/trace.h>
#include <volt/trainer/trainer.h>

using namespace volt;

namespace {

std::vector<std::string> take_events() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  if (!path) return {};
  void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return {};
  using Take = void (*)(std::vector<std::string>*);
  auto take = reinterpret_cast<Take>(dlsym(lib, "volt_nvtx_stub_take"));
  std::vector<std::string> out;
  if (take) take(&out);
  dlclose(lib);
  return out;
}

struct Net : TrainModule {
  nn::Linear l1{4, 8}, l2{8, 1};
  Net() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  Tensor training_step(const Batch& b, int64_t) override {
    return mse_loss(l2(l1(b.input).relu()).reshape({-1}), b.target);
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = 0.01}); }
};

std::shared_ptr<data::DataLoader> loader(int64_t n) {
  manual_seed(1);
  auto ds = std::make_shared<data::TensorDataset>(randn({n, 4}), randn({n}));
  return std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 8});
}

TrainerOptions quiet(int64_t steps) {
  return {.accelerator = "cpu", .devices = "1", .max_steps = steps, .num_sanity_val_steps = 0,
          .enable_progress_bar = false, .enable_model_summary = false, .enable_checkpointing = false,
          .logger = false};
}

int64_t index_of(const std::vector<std::string>& v, const std::string& e, int64_t from = 0) {
  auto it = std::find(v.begin() + from, v.end(), e);
  return it == v.end() ? -1 : it - v.begin();
}

}  // namespace

TEST(Nvtx, ToolIsAttached) {
  ASSERT_NE(std::getenv("NVTX_INJECTION64_PATH"), nullptr) << "run through CTest (it sets the stub library)";
  EXPECT_TRUE(trace::nvtx_attached());
  EXPECT_TRUE(trace::active());
}

TEST(Nvtx, TrainingStepRangesInTheirDomains) {
  Net m;
  Trainer t(quiet(2));
  take_events();
  t.fit(m, loader(32));
  const auto ev = take_events();
  ASSERT_FALSE(ev.empty()) << "the stub recorded nothing: NVTX did not load it";
  for (const char* e : {"push volt.trainer [Trainer]setup", "push volt.trainer run_training_epoch",
                        "push volt.trainer run_training_batch", "push volt.trainer [TrainModule]training_step",
                        "push volt.nn l1 (Linear)", "push volt.nn l2 (Linear)", "push volt.ops linear",
                        "push volt.kernels linear_act_fwd", "push volt.kernels gemm",
                        "push volt.trainer [Strategy]backward",
                        "push volt.nn l2 (Linear).backward", "push volt.nn l1 (Linear).backward",
                        "push volt.trainer optimizer_step", "push volt.optim [Optimizer]Adam.step",
                        "push volt.data [DataLoader]train_next", "push volt.data [Batch]to_device bytes=160",
                        "push volt.trainer [Trainer]teardown"})
    EXPECT_GE(index_of(ev, e), 0) << e;
  // Order inside the first step: training_step > module l1 > linear > its GEMM (linear_act_fwd), then backward,
  // then the step.
  const int64_t step = index_of(ev, "push volt.trainer [TrainModule]training_step");
  const int64_t l1 = index_of(ev, "push volt.nn l1 (Linear)", step);
  const int64_t lin = index_of(ev, "push volt.ops linear", l1);
  const int64_t gemm = index_of(ev, "push volt.kernels linear_act_fwd", lin);
  const int64_t bwd = index_of(ev, "push volt.trainer [Strategy]backward", gemm);
  const int64_t opt = index_of(ev, "push volt.optim [Optimizer]Adam.step", bwd);
  EXPECT_TRUE(step >= 0 && step < l1 && l1 < lin && lin < gemm && gemm < bwd && bwd < opt)
      << step << " " << l1 << " " << lin << " " << gemm << " " << bwd << " " << opt;
  // Pushes and pops balance per domain.
  std::map<std::string, int> depth;
  for (const auto& e : ev) {
    const auto sp = e.find(' '), sp2 = e.find(' ', sp + 1);
    const std::string kind = e.substr(0, sp), domain = e.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1);
    if (kind == "push") ++depth[domain];
    if (kind == "pop") ASSERT_GE(--depth[domain], 0) << e;
  }
  for (const auto& [d, n] : depth) EXPECT_EQ(n, 0) << d;
}

TEST(Nvtx, ProfileStepsMarksTheWindow) {
  Net m;
  auto o = quiet(5);
  o.profile_steps = "1:3";
  Trainer t(o);
  take_events();
  t.fit(m, loader(64));
  std::vector<std::string> seq;
  for (const auto& e : take_events())
    if (e == "push volt.trainer run_training_batch" || e.rfind("mark volt.trainer cudaProfiler", 0) == 0) seq.push_back(e);
  const std::vector<std::string> want{
      "push volt.trainer run_training_batch", "mark volt.trainer cudaProfilerStart",
      "push volt.trainer run_training_batch", "push volt.trainer run_training_batch",
      "mark volt.trainer cudaProfilerStop",   "push volt.trainer run_training_batch",
      "push volt.trainer run_training_batch"};
  EXPECT_EQ(seq, want);
}

TEST(Nvtx, CollectivesCarryTheirBytes) {
  auto pg = dist::make_single_group();
  Tensor t = ones({256});  // 1 KiB of f32
  take_events();
  pg->all_reduce(t);
  const auto ev = take_events();
  EXPECT_GE(index_of(ev, "push volt.distributed all_reduce bytes=1024"), 0) << (ev.empty() ? "" : ev.front());
}
