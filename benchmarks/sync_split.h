#pragma once
// Where a multi-rank step waits, from every rank's per-step waits at the step's collective (waits[rank][step],
// µs): the mean wait per rank and step; the collective's exposed time, read as the wait of each step's last rank
// to arrive (the smallest wait); and the ranks' skew, the spread between the first and the last rank to arrive.
// Header-only and free of Volt, for bench_train (the gradient all-reduce) and bench_lockstep (its one-integer
// all-reduce).
#include <algorithm>
#include <vector>

namespace volt::bench {

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
