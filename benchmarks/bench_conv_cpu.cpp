// bench_conv_cpu: the training step of a small CIFAR-style ResNet on the CPU, timed beside the same model in
// PyTorch (benchmarks/anchors/resnet_cpu_torch.py; benchmarks/conv_cpu_vs_torch.sh runs both and prints the
// ratio). Prints one JSON line:
//   {"bench":"conv_cpu","impl":"volt","model":"resnet8","width":16,"batch_size":32,"threads":1,"optimizer":"sgd",
//    "steps":20,"repeats":5,"ms_per_step":...,"ms_per_step_min":...,"ms_per_step_median":...,"ms_per_step_max":...,
//    "fwd_ms":...,"bwd_ms":...,"opt_ms":...,"samples_per_s":...,"loss":...}
// The model (identical in the PyTorch anchor): a 3x3 stem convolution (3 -> W channels) + batch norm + ReLU, then
// stages of basic blocks (conv3x3 + BN + ReLU + conv3x3 + BN, plus the input, or a 1x1 stride-2 convolution + BN
// of it where the shape changes, then ReLU); the first block of every stage after the first has stride 2;
// global average pooling (the mean over H and W) and a linear head to 10 classes. No convolution has a bias.
//   --model resnet8:  3 stages of 1 block, widths W, 2W, 4W   (He et al.'s CIFAR ResNet with n = 1)
//   --model resnet18: 4 stages of 2 blocks, widths W, 2W, 4W, 8W (ResNet-18 with a CIFAR stem; W = 64 is full width)
// One step: forward, cross-entropy, backward, optimizer update (SGD with momentum 0.9, or Adam), on one fixed
// batch of N x 3 x 32 x 32 f32 inputs and labels i % 10. Each of --repeats runs times --steps steps after
// --warmup steps; "ms_per_step" is the median run's mean, with the spread over runs; fwd/bwd/opt are the
// median run's per-phase means. CPU only: nothing to synchronise. --threads sets Volt's intra-op threads
// (set_num_threads; default 1).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <volt/kernels/ops.h>
#include <volt/kernels/threads.h>
#include <volt/nn/nn.h>
#include <volt/nn/optim.h>

using namespace volt;

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct BasicBlock {
  nn::Conv2d c1, c2;
  nn::BatchNorm2d b1, b2;
  std::unique_ptr<nn::Conv2d> sc;
  std::unique_ptr<nn::BatchNorm2d> sb;
  BasicBlock(int64_t in, int64_t out, int64_t stride)
      : c1(in, out, 3, stride, 1, false), c2(out, out, 3, 1, 1, false), b1(out), b2(out) {
    if (stride != 1 || in != out) {
      sc = std::make_unique<nn::Conv2d>(in, out, 1, stride, 0, false);
      sb = std::make_unique<nn::BatchNorm2d>(out);
    }
  }
  Tensor forward(const Tensor& x) {
    Tensor y = b2(c2(b1(c1(x)).relu()));
    Tensor s = sc ? (*sb)((*sc)(x)) : x;
    return (y + s).relu();
  }
  void collect(std::vector<Tensor>& ps) {
    for (nn::Module* m : std::vector<nn::Module*>{&c1, &b1, &c2, &b2, sc.get(), sb.get()})
      if (m)
        for (auto& p : m->parameters()) ps.push_back(p);
  }
};

struct ResNet {
  nn::Conv2d stem;
  nn::BatchNorm2d stem_bn;
  std::vector<std::unique_ptr<BasicBlock>> blocks;
  std::unique_ptr<nn::Linear> fc;
  ResNet(const std::string& model, int64_t w) : stem(3, w, 3, 1, 1, false), stem_bn(w) {
    const bool r18 = model == "resnet18";
    const int stages = r18 ? 4 : 3, per_stage = r18 ? 2 : 1;
    int64_t in = w;
    for (int s = 0; s < stages; ++s) {
      const int64_t out = w << s;
      for (int b = 0; b < per_stage; ++b) {
        blocks.push_back(std::make_unique<BasicBlock>(in, out, (s > 0 && b == 0) ? 2 : 1));
        in = out;
      }
    }
    fc = std::make_unique<nn::Linear>(in, 10);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = stem_bn(stem(x)).relu();
    for (auto& b : blocks) h = b->forward(h);
    return (*fc)(h.mean({2, 3}));
  }
  std::vector<Tensor> parameters() {
    std::vector<Tensor> ps = stem.parameters();
    for (auto& p : stem_bn.parameters()) ps.push_back(p);
    for (auto& b : blocks) b->collect(ps);
    for (auto& p : fc->parameters()) ps.push_back(p);
    return ps;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_conv_cpu: a small ResNet's CPU training step"};
  std::string model = "resnet8", optimizer = "sgd";
  int64_t width = 16, batch = 32;
  int steps = 20, warmup = 5, repeats = 5, threads = 1;
  app.add_option("--model", model, "resnet8 or resnet18")->check(CLI::IsMember({"resnet8", "resnet18"}));
  app.add_option("--width", width, "channels of the first stage")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "samples per step")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps before the runs")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "timed runs")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", optimizer, "sgd (momentum 0.9) or adam")->check(CLI::IsMember({"sgd", "adam"}));
  CLI11_PARSE(app, argc, argv);

  set_num_threads(threads);
  manual_seed(0);
  ResNet net(model, width);
  std::vector<Tensor> params = net.parameters();
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "sgd") opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  else opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-3});
  Tensor x = randn({batch, 3, 32, 32});
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % 10;
  Tensor y = from_vector<int64_t>(labels, {batch});

  double fwd = 0, bwd = 0, upd = 0;
  float last_loss = 0;
  auto step = [&] {
    const auto t0 = Clock::now();
    opt->zero_grad();
    Tensor loss = cross_entropy(net.forward(x), y);
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    opt->step();
    const auto t3 = Clock::now();
    fwd += ms_between(t0, t1);
    bwd += ms_between(t1, t2);
    upd += ms_between(t2, t3);
    last_loss = loss.item<float>();
  };
  for (int i = 0; i < warmup; ++i) step();
  struct Run {
    double step_ms, fwd_ms, bwd_ms, opt_ms;
  };
  std::vector<Run> runs;
  for (int r = 0; r < repeats; ++r) {
    fwd = bwd = upd = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    runs.push_back({ms_between(t0, Clock::now()) / steps, fwd / steps, bwd / steps, upd / steps});
  }
  std::vector<Run> sorted = runs;
  std::sort(sorted.begin(), sorted.end(), [](const Run& a, const Run& b) { return a.step_ms < b.step_ms; });
  const Run& med = sorted[(sorted.size() - 1) / 2];  // the lower middle of an even count
  std::printf("{\"bench\":\"conv_cpu\",\"impl\":\"volt\",\"model\":\"%s\",\"width\":%lld,\"batch_size\":%lld,"
              "\"threads\":%d,\"optimizer\":\"%s\",\"steps\":%d,\"repeats\":%d,\"ms_per_step\":%.3f,"
              "\"ms_per_step_min\":%.3f,\"ms_per_step_median\":%.3f,\"ms_per_step_max\":%.3f,\"fwd_ms\":%.3f,"
              "\"bwd_ms\":%.3f,\"opt_ms\":%.3f,\"samples_per_s\":%.1f,\"loss\":%.4f}\n",
              model.c_str(), static_cast<long long>(width), static_cast<long long>(batch), threads, optimizer.c_str(),
              steps, repeats, med.step_ms, sorted.front().step_ms, med.step_ms, sorted.back().step_ms, med.fwd_ms,
              med.bwd_ms, med.opt_ms, static_cast<double>(batch) * 1e3 / med.step_ms, last_loss);
  std::fflush(stdout);
  std::fprintf(stderr, "bench_conv_cpu: %s width %lld batch %lld, %d run(s) of %d steps: ms/step min %.2f median %.2f "
               "max %.2f (fwd %.2f bwd %.2f opt %.2f)\n",
               model.c_str(), static_cast<long long>(width), static_cast<long long>(batch), repeats, steps,
               sorted.front().step_ms, med.step_ms, sorted.back().step_ms, med.fwd_ms, med.bwd_ms, med.opt_ms);
  return 0;
}
