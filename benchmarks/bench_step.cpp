// bench_step: the MNIST MLP training step (784-128-10, cross-entropy, Adam) in a hand-written loop, without
// the Trainer or a DataLoader: the floor the Trainer's own overhead is measured against. Prints one JSON line
// per batch size:
//   {"bench":"step","model":"mlp","batch_size":16,"repeats":3,"us_per_step":...,"us_per_step_min":...,
//    "us_per_step_median":...,"us_per_step_max":...,"samples_per_s":...,"adam_us":...,"reference_us":...,
//    "step_over_reference":...}
// Each of --repeats N runs (default 3) times a loop of steps, then a loop of Adam updates alone, then a fixed
// amount of reference work: a plain C++ f32 product of (256 x 784) by (784 x 128), the first layer's forward
// GEMM at batch 256, written out in this file so that no change to Volt can make it faster or slower.
// us_per_step, samples_per_s and adam_us are the median run's; "step_over_reference" is the fastest step over the
// fastest reference product, a machine-independent-ish figure for regression checks (tests/benchmarks/
// check_bench_step_ratio.sh): measured in the same process, a busy or slow machine slows both.
// One thread (set_num_threads(1)); CPU only, so there is no device to synchronise.
//   bench_step [--repeats N] [--scale F]   (F scales the loops' lengths, default 1: 4000 steps at batch 16,
//                                           1000 at 256, 200 reference products)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <volt/kernels/ops.h>
#include <volt/kernels/threads.h>
#include <volt/nn/nn.h>
#include <volt/nn/optim.h>

using namespace volt;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The reference work: C = A B for A (m x k), B (k x n), row-major, i-k-j order (the compiler vectorises the
// inner loop). Returns a checksum so that the work cannot be optimised away.
__attribute__((noinline)) float reference_gemm(const std::vector<float>& a, const std::vector<float>& b,
                                               std::vector<float>& c, int m, int k, int n) {
  std::fill(c.begin(), c.end(), 0.0f);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) {
      const float aip = a[static_cast<size_t>(i) * k + p];
      const float* brow = &b[static_cast<size_t>(p) * n];
      float* crow = &c[static_cast<size_t>(i) * n];
      for (int j = 0; j < n; ++j) crow[j] += aip * brow[j];
    }
  return c[0] + c[c.size() - 1];
}

int usage(const char* why) {
  std::fprintf(stderr, "bench_step: %s\nusage: bench_step [--repeats N >= 1] [--scale F > 0]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3;
  double scale = 1.0;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--repeats") && has_value) {
      repeats = std::atoi(argv[++i]);
      if (repeats < 1) return usage("--repeats must be at least 1");
    } else if (!std::strcmp(argv[i], "--scale") && has_value) {
      scale = std::atof(argv[++i]);
      if (!(scale > 0)) return usage("--scale must be positive");
    } else {
      return usage((std::string("unknown or incomplete argument '") + argv[i] + "'").c_str());
    }
  }
  set_num_threads(1);
  const int ref_m = 256, ref_k = 784, ref_n = 128;
  std::vector<float> ra(static_cast<size_t>(ref_m) * ref_k), rb(static_cast<size_t>(ref_k) * ref_n),
      rc(static_cast<size_t>(ref_m) * ref_n);
  for (size_t i = 0; i < ra.size(); ++i) ra[i] = static_cast<float>(i % 17) * 0.01f;
  for (size_t i = 0; i < rb.size(); ++i) rb[i] = static_cast<float>(i % 13) * 0.01f;
  volatile float sink = 0;
  const int ref_iters = std::max(1, static_cast<int>(200 * scale));
  for (int64_t batch : {16, 256}) {
    manual_seed(1);
    nn::Linear l1(784, 128), l2(128, 10);
    std::vector<Tensor> params = l1.parameters();
    for (auto& p : l2.parameters()) params.push_back(p);
    Tensor x = rand({batch, 784});
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % 10;
    Tensor y = from_vector<int64_t>(labels, {batch});
    optim::Adam opt(params, {.lr = 1e-3});
    auto step = [&] {
      opt.zero_grad();
      Tensor loss = cross_entropy(l2(l1(x).relu()), y);
      loss.backward();
      opt.step();
    };
    for (int i = 0; i < 50; ++i) step();
    for (int i = 0; i < 5; ++i) sink = sink + reference_gemm(ra, rb, rc, ref_m, ref_k, ref_n);
    const int iters = std::max(1, static_cast<int>((batch == 16 ? 4000 : 1000) * scale));
    std::vector<double> step_us, adam_us, ref_us;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) step();
      step_us.push_back(1e6 * seconds_since(t0) / iters);
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) opt.step();
      adam_us.push_back(1e6 * seconds_since(t0) / iters);
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < ref_iters; ++i) sink = sink + reference_gemm(ra, rb, rc, ref_m, ref_k, ref_n);
      ref_us.push_back(1e6 * seconds_since(t0) / ref_iters);
    }
    std::vector<double> sorted = step_us;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = (sorted.size() - 1) / 2;  // the lower middle of an even count
    const size_t median_run = static_cast<size_t>(std::find(step_us.begin(), step_us.end(), sorted[mid]) -
                                                  step_us.begin());
    const double ref_min = *std::min_element(ref_us.begin(), ref_us.end());
    std::printf("{\"bench\":\"step\",\"model\":\"mlp\",\"batch_size\":%lld,\"repeats\":%d,\"iters\":%d,"
                "\"us_per_step\":%.2f,\"us_per_step_min\":%.2f,\"us_per_step_median\":%.2f,\"us_per_step_max\":%.2f,"
                "\"samples_per_s\":%.0f,\"adam_us\":%.2f,\"reference\":\"gemm_%dx%dx%d_f32_plain\","
                "\"reference_us\":%.2f,\"step_over_reference\":%.4f}\n",
                static_cast<long long>(batch), repeats, iters, sorted[mid], sorted.front(), sorted[mid],
                sorted.back(), static_cast<double>(batch) * 1e6 / sorted[mid], adam_us[median_run], ref_m, ref_k,
                ref_n, ref_min, sorted.front() / ref_min);
    std::fflush(stdout);
    std::fprintf(stderr, "bench_step: batch %lld, %d run(s): us_per_step min %.2f median %.2f max %.2f\n",
                 static_cast<long long>(batch), repeats, sorted.front(), sorted[mid], sorted.back());
  }
  return 0;
}
