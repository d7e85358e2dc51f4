// bench_lockstep: how fast this machine can run N processes in lockstep, whatever the training code. Every rank
// repeats the same fixed CPU work (a dependent chain of fmaf calls on registers, reading no data) and then an
// all-reduce of one integer, which makes each step end when the last rank arrives. With one process the step is
// the work alone; with N ranks it is the slowest rank's work, step by step, so N x (one-process µs per step) /
// (N-rank µs per step) is the best scaling ratio any synchronous data-parallel step of that length can reach
// here. On a quiet machine it is close to N; on one whose cores run at uneven or varying speed (shared or
// throttled virtual CPUs) it is lower, by about the steps' spread. benchmarks/ddp_scaling.sh --ceiling runs it
// beside bench_train to separate the machine's part of a DDP shortfall from Volt's.
//
//   bench_lockstep [--step-us 2000] [--steps 1000] [--repeats 3]   one process: calibrates the work, prints "iters"
//   mpirun -np N --bind-to core bench_lockstep --iters I             N ranks doing exactly that work
//
// The work is --iters chain links, or, without it, as many as rank 0 measures to take --step-us on its core (the
// fastest of several timed runs). Compare runs with the same "iters": a second calibration, on a machine busy
// with the other ranks' start-up, would give the N-rank run different work.
//
// --repeats R runs the timed loop R times (default 3). Prints one JSON line (rank 0), steady state (the first tenth
// of each loop's steps, at least 10, left out); "us_per_step" is the median over the repeats of rank 0's mean
// step, with the fastest and slowest repeat in "us_per_step_min" / "us_per_step_max", and the other fields come
// from that median repeat:
//   {"bench":"lockstep","np":N,"step_us":target,"iters":I,"steps":S,"repeats":R,"us_per_step":rank 0's mean step,
//    "us_per_step_min":...,"us_per_step_median":(= us_per_step),"us_per_step_max":...,
//    "busy_us":mean work time per rank and step,"busy_sd_us":its standard deviation over all ranks' steps,
//    "wait_us":mean time per rank and step in the all-reduce,"collective_us":mean per step of the smallest wait
//    (the last rank's),"skew_us":mean per step of the largest wait less the smallest}
// For every rank, each step's time is its work plus its wait, so us_per_step ≈ busy_us + wait_us.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/steady_state.h"

namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// The chain's coefficients, read at run time: with constants the compiler could fold the whole chain.
volatile float g_scale = 0.9999999f, g_shift = 1e-7f;

// `iters` dependent fused multiply-adds: a fixed amount of core work that reads no data, so its time varies only
// with the core's speed and what else runs on it.
float spin(int64_t iters, float x) {
  const float a = g_scale, b = g_shift;
  for (int64_t i = 0; i < iters; ++i) x = std::fma(x, a, b);
  return x;
}

std::string fmt_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", us);
  return buf;
}

// Iterations per microsecond on this rank's core: the fastest of several timed runs (the least disturbed).
double iterations_per_us() {
  constexpr int64_t kProbe = 2'000'000;
  double best = 0;
  volatile float sink = 0;
  for (int t = 0; t < 7; ++t) {
    const auto t0 = Clock::now();
    sink = spin(kProbe, sink + 1.0f);
    best = std::max(best, static_cast<double>(kProbe) / micros(t0, Clock::now()));
  }
  return best;
}

struct Repeat {
  double us_per_step = 0, busy_mean = 0, busy_sd = 0;
  volt::bench::SyncSplit split;
};

// One timed loop of `steps` lockstep steps; the statistics are meaningful on rank 0 only.
Repeat run_loop(int64_t iters, int64_t steps, int rank, int world) {
  const int64_t warmup = volt::bench::warmup_steps(steps);
  std::vector<double> busy, wait;  // this rank's steady-state steps
  busy.reserve(static_cast<size_t>(steps));
  wait.reserve(static_cast<size_t>(steps));
  float x = 1.0f;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int64_t s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    x = spin(iters, x);
    asm volatile("" : : "g"(x) : "memory");  // x is needed here: the chain cannot move out of the timed region
    const auto t1 = Clock::now();
    int mine = 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const auto t2 = Clock::now();
    if (s >= warmup) {
      busy.push_back(micros(t0, t1));
      wait.push_back(micros(t1, t2));
    }
  }
  // Every rank's steady-state steps on rank 0 (every rank ran the same count).
  const int n = static_cast<int>(busy.size());
  std::vector<double> all_busy(static_cast<size_t>(n) * world), all_wait(static_cast<size_t>(n) * world);
  MPI_Gather(busy.data(), n, MPI_DOUBLE, all_busy.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(wait.data(), n, MPI_DOUBLE, all_wait.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  Repeat r;
  if (rank != 0) return r;
  double step_sum = 0, busy_sum = 0;
  for (int i = 0; i < n; ++i) step_sum += busy[static_cast<size_t>(i)] + wait[static_cast<size_t>(i)];
  for (double b : all_busy) busy_sum += b;
  const double count = static_cast<double>(all_busy.size());
  r.busy_mean = busy_sum / count;
  double var = 0;
  for (double b : all_busy) var += (b - r.busy_mean) * (b - r.busy_mean);
  r.busy_sd = std::sqrt(var / count);
  r.us_per_step = step_sum / n;
  std::vector<std::vector<double>> waits(static_cast<size_t>(world));
  for (int q = 0; q < world; ++q)
    waits[static_cast<size_t>(q)].assign(all_wait.begin() + static_cast<ptrdiff_t>(q) * n,
                                         all_wait.begin() + static_cast<ptrdiff_t>(q + 1) * n);
  r.split = volt::bench::split_sync_waits(waits);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  double step_us = 2000;
  int64_t steps = 1000, fixed_iters = 0;
  int repeats = 3;
  CLI::App app{"Lockstep ceiling: N ranks repeating fixed CPU work with an all-reduce per step"};
  app.add_option("--step-us", step_us, "the work per step, in microseconds of this machine's fastest core")
      ->check(CLI::Range(1.0, 1e7));
  app.add_option("--steps", steps, "steps to run (the first tenth, at least 10, is warm-up)")
      ->check(CLI::Range(int64_t{20}, int64_t{100'000'000}));
  app.add_option("--iters", fixed_iters, "the work per step in chain links, instead of calibrating --step-us")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000'000}));
  app.add_option("--repeats", repeats, "timed loops to run; the median one is reported")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // The same work on every rank: --iters, or rank 0's calibration, broadcast.
  int64_t iters = fixed_iters;
  if (iters == 0) {
    if (rank == 0) iters = std::max<int64_t>(1, std::llround(step_us * iterations_per_us()));
    MPI_Bcast(&iters, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  }

  std::vector<Repeat> runs;
  for (int r = 0; r < repeats; ++r) runs.push_back(run_loop(iters, steps, rank, world));
  if (rank == 0) {
    std::sort(runs.begin(), runs.end(), [](const Repeat& a, const Repeat& b) { return a.us_per_step < b.us_per_step; });
    const Repeat& med = runs[runs.size() / 2];
    // The requested length, or null when --iters fixed the work instead.
    const std::string target = fixed_iters ? std::string("null") : fmt_us(step_us);
    std::printf("{\"bench\":\"lockstep\",\"np\":%d,\"step_us\":%s,\"iters\":%lld,\"steps\":%lld,\"repeats\":%d,"
                "\"us_per_step\":%.1f,\"us_per_step_min\":%.1f,\"us_per_step_median\":%.1f,\"us_per_step_max\":%.1f,"
                "\"busy_us\":%.1f,"
                "\"busy_sd_us\":%.1f,\"wait_us\":%.1f,\"collective_us\":%.1f,\"skew_us\":%.1f}\n",
                world, target.c_str(), static_cast<long long>(iters), static_cast<long long>(steps), repeats,
                med.us_per_step, runs.front().us_per_step, med.us_per_step, runs.back().us_per_step, med.busy_mean,
                med.busy_sd,
                med.split.wait_us, med.split.collective_us, med.split.skew_us);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
