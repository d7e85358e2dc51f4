#pragma once
// Steady-state figures shared by bench_train and bench_lockstep (header-only and free of Volt, since
// bench_lockstep links MPI alone): how many leading steps are warm-up, and where a multi-rank step waits.
//
// The wait split, from every rank's per-step waits at the step's collective (waits[rank][step], µs): the mean
// wait per rank and step; the collective's exposed time, read as the wait of each step's last rank to arrive (the
// smallest wait); and the ranks' skew, the spread between the first and the last rank to arrive.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace volt::bench {

// Steps of a run of n left out as warm-up: a tenth, at least 10, at most half.
inline int64_t warmup_steps(int64_t n) { return std::min(std::max<int64_t>(10, n / 10), n / 2); }

struct SyncSplit {
  double wait_us = 0, collective_us = 0, skew_us = 0;
};

// Every rank's vector must have the same length (ranks in lockstep run the same steps).
inline SyncSplit split_sync_waits(const std::vector<std::vector<double>>& waits) {
  SyncSplit r;
  if (waits.empty() || waits[0].empty()) return r;
  const size_t steps = waits[0].size();
  double total = 0;
  for (size_t i = 0; i < steps; ++i) {
    double lo = waits[0][i], hi = waits[0][i];
    for (const auto& w : waits) {
      lo = std::min(lo, w[i]);
      hi = std::max(hi, w[i]);
      total += w[i];
    }
    r.collective_us += lo;
    r.skew_us += hi - lo;
  }
  r.wait_us = total / static_cast<double>(steps * waits.size());
  r.collective_us /= static_cast<double>(steps);
  r.skew_us /= static_cast<double>(steps);
  return r;
}

}  // namespace volt::bench
