// Single-thread CPU GEMM throughput of a 784-128-10 MLP (forward through volt::linear, the dW and dX products
// through volt::matmul on transposed views) at batch 16 and 256, beside the core's FMA peak
// measured by a hand-written AVX2 loop. One JSON object per line.
//
//   bench_gemm [--min-ms N] [--repeats R]
// Each figure is measured R times (default 3), each time as the best of 30 trials of about N ms (default 5);
// "gflops" is the median of the R, beside "gflops_min" and "gflops_max". CPU only: no device to synchronise.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <volt/kernels/ops.h>

// Present when the CPU GEMM goes through OpenBLAS; pins its thread pool to one thread.
extern "C" __attribute__((weak)) void openblas_set_num_threads(int);

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-trials timing: the minimum is the least disturbed by other processes on a shared machine.
template <class F>
double best_seconds_per_call(F&& f, double min_trial_s) {
  f();
  int reps = 1;
  double t = 0;
  for (;;) {
    double t0 = now_s();
    for (int i = 0; i < reps; ++i) f();
    t = now_s() - t0;
    if (t >= min_trial_s) break;
    reps *= 2;
  }
  double best = t;
  for (int trial = 0; trial < 30; ++trial) {
    double t0 = now_s();
    for (int i = 0; i < reps; ++i) f();
    best = std::min(best, now_s() - t0);
  }
  return best / reps;
}

#if defined(__AVX2__) && defined(__FMA__)
// 12 independent 8-wide FMA chains: enough to cover 2 FMA ports x 4-5 cycles of latency.
__attribute__((noinline)) float fma_chains(long iters) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
  asm volatile("");  // a side effect: the compiler may not treat repeated calls as one (pure) value
  for (long i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm256_fmadd_ps(a, m, c);
  float s = 0, lanes[8];
  for (auto& a : acc) {
    _mm256_storeu_ps(lanes, a);
    s += lanes[0];
  }
  return s;
}

double fma_peak_gflops(double min_trial_s) {
  volatile long iters_v = 200000;
  const long iters = iters_v;
  volatile float sink = 0;
  double t = best_seconds_per_call([&] { sink = sink + fma_chains(iters); }, min_trial_s);
  return static_cast<double>(iters) * 12 * 16 / t / 1e9;  // 8 lanes x (mul + add) per FMA
}
#else
double fma_peak_gflops(double) { return 0.0; }
#endif

// min, median (the lower middle of an even count) and max.
struct Spread {
  double min, median, max;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[(v.size() - 1) / 2], v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  double min_ms = 5;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--min-ms") && i + 1 < argc) {
      min_ms = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "bench_gemm: unknown or incomplete argument '%s'\n"
                           "usage: bench_gemm [--min-ms N > 0] [--repeats R >= 1]\n", argv[i]);
      return 2;
    }
  }
  if (!(min_ms > 0) || repeats < 1) {
    std::fprintf(stderr, "bench_gemm: --min-ms must be positive and --repeats at least 1\n");
    return 2;
  }
  const double trial_s = min_ms / 1000.0;
  if (openblas_set_num_threads) openblas_set_num_threads(1);
  using namespace volt;
  NoGradGuard ng;
  double peak = fma_peak_gflops(trial_s);
  std::printf("{\"probe\":\"avx2_fma_peak\",\"peak_gflops\":%.1f,\"backend\":\"%s\"}\n", peak,
              openblas_set_num_threads ? "openblas" : "eigen");
  struct Layer { int64_t in, out; };
  for (int64_t batch : {16, 256}) {
    double total_flops = 0, total_s = 0;
    for (Layer l : {Layer{784, 128}, Layer{128, 10}}) {
      Generator g(7);
      Tensor x = rand({batch, l.in}, DType::f32, kCPU, &g, -1, 1);
      Tensor w = rand({l.out, l.in}, DType::f32, kCPU, &g, -1, 1);
      Tensor gy = rand({batch, l.out}, DType::f32, kCPU, &g, -1, 1);
      const double flops = 2.0 * static_cast<double>(batch * l.in * l.out);
      struct Op { const char* name; std::function<Tensor()> fn; };
      Op ops[] = {{"fwd", [&] { return linear(x, w); }},          // y = x W^T        (B, out)
                  {"dW", [&] { return matmul(gy.t(), x); }},     // dW = gy^T x      (out, in)
                  {"dX", [&] { return matmul(gy, w); }}};        // dX = gy W        (B, in)
      for (auto& op : ops) {
        std::vector<double> times;
        for (int r = 0; r < repeats; ++r) times.push_back(best_seconds_per_call([&] { op.fn(); }, trial_s));
        const Spread t = spread(times);
        double gf = flops / t.median / 1e9;
        total_flops += flops;
        total_s += t.median;
        std::printf("{\"shape\":\"%ldx%ldx%ld\",\"op\":\"%s\",\"batch\":%ld,\"gflops\":%.1f,\"peak_gflops\":%.1f,"
                    "\"fraction_of_peak\":%.3f,\"repeats\":%d,\"gflops_min\":%.1f,\"gflops_median\":%.1f,"
                    "\"gflops_max\":%.1f}\n",
                    static_cast<long>(batch), static_cast<long>(l.in), static_cast<long>(l.out), op.name,
                    static_cast<long>(batch), gf, peak, peak > 0 ? gf / peak : 0.0, repeats, flops / t.max / 1e9, gf,
                    flops / t.min / 1e9);
        std::fflush(stdout);
      }
    }
    // The whole MLP step's GEMMs (both layers, forward and both backward products) as one figure (medians).
    const double gf = total_flops / total_s / 1e9;
    std::printf("{\"shape\":\"mlp_784_128_10\",\"op\":\"all\",\"batch\":%ld,\"gflops\":%.1f,\"peak_gflops\":%.1f,"
                "\"fraction_of_peak\":%.3f}\n",
                static_cast<long>(batch), gf, peak, peak > 0 ? gf / peak : 0.0);
  }
  return 0;
}
