#pragma once
// ThroughputMonitor: a callback measuring training samples per second over the wall time spent inside
// training epochs (validation runs, checkpointing and start-up are excluded). Used by the examples
// (results.json) and benchmarks/bench_train. Its totals are saved in checkpoints (state_dict), so a resumed run
// reports the whole run.
#include <chrono>
#include <cmath>
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

  // Checkpointed, so that after a resume the totals describe the whole run, not only the resumed part.
  nlohmann::json state_dict() const override { return {{"samples", samples_}, {"seconds", seconds()}}; }
  void load_state_dict(const nlohmann::json& s) override {
    VOLT_CHECK(s.is_object() && s.contains("samples") && s.contains("seconds") && s["samples"].is_number_unsigned() &&
                   s["seconds"].is_number() && s["seconds"].get<double>() >= 0 &&
                   std::isfinite(s["seconds"].get<double>()) &&
                   s["samples"].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
               "ThroughputMonitor.load_state_dict: expected {\"samples\": integer >= 0, \"seconds\": number >= 0}, got ",
               s.dump());
    samples_ = s["samples"].get<int64_t>();
    seconds_ = s["seconds"].get<double>();
    running_ = false;
  }

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
