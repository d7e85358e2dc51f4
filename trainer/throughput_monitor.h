#pragma once
// ThroughputMonitor: a callback measuring training samples per second over the wall time spent inside
// training epochs (validation runs, checkpointing and start-up are excluded). Used by the examples
// (results.json) and benchmarks/bench_train.
#include <chrono>
#include <cstdint>

#include "trainer/callback.h"

namespace volt {

class ThroughputMonitor : public Callback {
 public:
  std::string state_key() const override { return "ThroughputMonitor"; }
  void on_train_epoch_start(Trainer&, TrainModule&) override {
    flush();
    start_ = last_ = Clock::now();
    running_ = true;
  }
  void on_train_batch_end(Trainer&, TrainModule&, const Tensor&, const Batch& batch, int64_t) override {
    samples_ += batch.size();
    last_ = Clock::now();
  }
  // Time runs from the epoch's start to its last finished batch, so work after it (validation at the end of
  // the epoch, checkpoints) is not counted, and an epoch cut short by max_steps still counts.
  void on_train_epoch_end(Trainer&, TrainModule&) override { flush(); }
  double seconds() const {
    return seconds_ + (running_ ? std::chrono::duration<double>(last_ - start_).count() : 0.0);
  }
  double samples_per_second() const { return seconds() > 0 ? static_cast<double>(samples_) / seconds() : 0.0; }
  int64_t samples() const { return samples_; }

 private:
  using Clock = std::chrono::steady_clock;
  void flush() {
    if (running_) seconds_ += std::chrono::duration<double>(last_ - start_).count();
    running_ = false;
  }
  Clock::time_point start_, last_;
  bool running_ = false;
  int64_t samples_ = 0;
  double seconds_ = 0;
};

}  // namespace volt
