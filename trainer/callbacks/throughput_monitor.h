#pragma once
/// @file
/// ThroughputMonitor: a callback measuring training throughput.
///
/// Totals: samples per second over the wall time spent inside training epochs (validation runs, checkpointing
/// and start-up are excluded), used by the examples (results.json) and benchmarks/bench_train, and saved in
/// checkpoints (state_dict) so a resumed run reports the whole run.
///
/// Logged every log_every_n_steps optimizer steps (options.log), over the steps since the previous log and
/// without the time and FLOPs of validation runs in between:
/// @code{.unparsed}
///   throughput/samples_per_sec          all ranks (this rank's rate x world size)
///   throughput/device/samples_per_sec   this rank
///   throughput/device/batches_per_sec
///   throughput/device/flops_per_sec     FLOPs of the GEMMs and convolutions (forward and backward) counted by
///                                       runtime/trace.h's counter: linear, matmul and conv2d layers
///   throughput/device/mfu               flops_per_sec / the device's peak for the compute dtype (only when a
///                                       peak is known: options.peak_flops, or a known GPU)
///   throughput/tokens_per_sec           with options.length_fn: all ranks
///   throughput/device/tokens_per_sec    with options.length_fn: this rank
/// @endcode
/// With options.flops_per_sample the FLOPs are the model's own count (a language model's (6N + 6LCT)T per
/// sequence, say) times the samples, instead of the traced GEMMs, which miss fused attention.
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <string>

#include <volt/runtime/dtype.h>
#include <volt/trainer/callback.h>

namespace volt {

struct ThroughputMonitorOptions {
  /// Peak FLOP/s of one device for MFU. 0: the GPU's dense peak for the run's compute dtype when the GPU is known
  /// (device_peak_flops), else no MFU (the CPU has no table: give its peak here).
  double peak_flops = 0;
  bool log = true;  ///< log the throughput/... metrics
  /// Tokens (or other items) in a batch, for the tokens_per_sec metrics and totals; empty: none counted.
  std::function<int64_t(const Batch&)> length_fn;
  /// FLOPs of one sample's training step (forward and backward); 0: the FLOPs traced by the GEMM counter.
  double flops_per_sample = 0;
};

/// Dense peak FLOP/s of a GPU by its CUDA name (H100 SXM/PCIe, H200, A100, L40S, L4, A10) for f64, f32, tf32
/// (f32 with TF32 allowed), f16 and bf16; 0 when unknown.
double device_peak_flops(const std::string& device_name, DType compute, bool tf32 = false);

class ThroughputMonitor : public Callback {
 public:
  explicit ThroughputMonitor(ThroughputMonitorOptions options = {});
  std::string state_key() const override { return "ThroughputMonitor"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  /// Time runs from the epoch's start to its last finished batch, so work after it (validation at the end of
  /// the epoch, checkpoints) is not counted, and an epoch cut short by max_steps still counts.
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override { flush(); }
  void on_validation_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;

  double seconds() const;
  double samples_per_second() const { return seconds() > 0 ? static_cast<double>(samples_) / seconds() : 0.0; }
  int64_t samples() const { return samples_; }
  /// Tokens counted by options.length_fn (0 without it), and their rate over the same time as samples.
  int64_t tokens() const { return tokens_; }
  double tokens_per_second() const { return seconds() > 0 ? static_cast<double>(tokens_) / seconds() : 0.0; }
  /// The peak used for MFU (0: none) and the metrics of the latest log.
  double peak_flops() const { return peak_; }
  const std::map<std::string, double>& last_metrics() const { return last_metrics_; }

  /// Checkpointed, so that after a resume the totals describe the whole run, not only the resumed part.
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& s) override;

 private:
  using Clock = std::chrono::steady_clock;
  void flush();
  ThroughputMonitorOptions opt_;
  Clock::time_point start_, last_;
  bool running_ = false;
  int64_t samples_ = 0, tokens_ = 0;
  double seconds_ = 0;
  /// The logging window: since the previous log, validation excluded.
  double peak_ = 0;
  int world_ = 1;
  double win_seconds_ = 0;
  int64_t win_samples_ = 0, win_batches_ = 0, win_tokens_ = 0;
  uint64_t win_flops_start_ = 0, flops_excluded_ = 0, val_flops_start_ = 0, val_end_flops_ = 0;
  bool after_validation_ = false;
  std::map<std::string, double> last_metrics_;
};

}  // namespace volt
