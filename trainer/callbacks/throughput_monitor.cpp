#include <volt/trainer/callbacks/throughput_monitor.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <volt/kernels/ops.h>
#include <volt/runtime/trace.h>
#include <volt/trainer/trainer.h>

namespace volt {

double device_peak_flops(const std::string& name, DType compute, bool tf32) {
  struct Peaks {
    double f64, f32, tf32, half;  // dense FLOP/s; half = f16 and bf16 tensor cores
  };
  // The model is matched as a whole word of the name ("NVIDIA A100-SXM4-80GB" has the words NVIDIA, A100, SXM4,
  // 80GB), so an L40 is not taken for an L4 nor an A10G for an A10; an unknown model has no peak.
  std::vector<std::string> words;
  std::string w;
  for (char c : name + " ") {
    if (c == ' ' || c == '-' || c == '_') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  auto has = [&](const char* s) { return std::find(words.begin(), words.end(), s) != words.end(); };
  Peaks p{};
  if (has("H200") || has("GH200")) p = {67e12, 67e12, 494.7e12, 989.4e12};
  else if (has("H100") && has("PCIe")) p = {51.2e12, 51.2e12, 378e12, 756e12};
  else if (has("H100") && !has("NVL")) p = {67e12, 67e12, 494.7e12, 989.4e12};
  else if (has("A100")) p = {19.5e12, 19.5e12, 156e12, 312e12};
  else if (has("L40S")) p = {1.4e12, 91.6e12, 183e12, 362e12};
  else if (has("L4")) p = {0.5e12, 30.3e12, 60e12, 121e12};
  else if (has("A10")) p = {0.98e12, 31.2e12, 62.5e12, 125e12};
  else return 0.0;
  switch (compute) {
    case DType::f64: return p.f64;
    case DType::f32: return tf32 ? p.tf32 : p.f32;
    case DType::f16:
    case DType::bf16: return p.half;
    default: return 0.0;
  }
}

ThroughputMonitor::ThroughputMonitor(ThroughputMonitorOptions options) : opt_(options) {
  VOLT_CHECK(std::isfinite(opt_.peak_flops) && opt_.peak_flops >= 0, "ThroughputMonitor: peak_flops=",
             opt_.peak_flops, " must be a finite number >= 0");
  VOLT_CHECK(std::isfinite(opt_.flops_per_sample) && opt_.flops_per_sample >= 0, "ThroughputMonitor: ",
             "flops_per_sample=", opt_.flops_per_sample, " must be a finite number >= 0 (0: the traced GEMMs)");
}

void ThroughputMonitor::on_fit_start(Trainer& trainer, TrainModule&) {
  world_ = trainer.strategy().world_size();
  peak_ = opt_.peak_flops;
  if (peak_ == 0) {
    const Precision p = trainer.precision();
    const DType compute = is_mixed(p) ? precision_autocast_dtype(p) : precision_param_dtype(p);
    peak_ = device_peak_flops(trace::device_name(trainer.strategy().root_device()), compute, allow_tf32());
  }
  last_metrics_.clear();
}

void ThroughputMonitor::on_train_epoch_start(Trainer&, TrainModule&) {
  flush();
  start_ = last_ = Clock::now();
  running_ = true;
  after_validation_ = false;
  win_seconds_ = 0;
  win_samples_ = win_batches_ = win_tokens_ = 0;
  win_flops_start_ = trace::flops_counted();
  flops_excluded_ = 0;
}

void ThroughputMonitor::on_validation_start(Trainer&, TrainModule&) { val_flops_start_ = trace::flops_counted(); }

void ThroughputMonitor::on_validation_end(Trainer&, TrainModule&) {
  val_end_flops_ = trace::flops_counted();
  flops_excluded_ += val_end_flops_ - val_flops_start_;
  after_validation_ = true;  // the time since the previous batch includes the validation run: not counted
}

void ThroughputMonitor::on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const Batch& batch,
                                           int64_t) {
  const Clock::time_point now = Clock::now();
  samples_ += batch.size();
  int64_t tokens = 0;
  if (opt_.length_fn) {
    tokens = opt_.length_fn(batch);
    VOLT_CHECK(tokens >= 0, "ThroughputMonitor: length_fn returned ", tokens, " for a batch of ", batch.size(),
               " samples; expected a count >= 0");
    tokens_ += tokens;
  }
  // A batch that followed a validation run has no time of its own (the interval holds the validation): its
  // samples, time and FLOPs stay out of the window.
  if (!after_validation_) {
    win_seconds_ += std::chrono::duration<double>(now - last_).count();
    win_samples_ += batch.size();
    win_tokens_ += tokens;
    ++win_batches_;
  } else {
    flops_excluded_ += trace::flops_counted() - val_end_flops_;
  }
  after_validation_ = false;
  last_ = now;
  const int64_t every = trainer.options().log_every_n_steps;
  if (!opt_.log || !trainer.stepped_last_batch() || trainer.global_step() % every != 0 || win_seconds_ <= 0) return;
  const uint64_t counted = trace::flops_counted();
  const double flops = opt_.flops_per_sample > 0 ? opt_.flops_per_sample * static_cast<double>(win_samples_)
                                                 : static_cast<double>(counted - win_flops_start_ - flops_excluded_);
  std::map<std::string, double> m;
  const double sps = static_cast<double>(win_samples_) / win_seconds_;
  m["throughput/device/samples_per_sec"] = sps;
  m["throughput/samples_per_sec"] = sps * world_;
  m["throughput/device/batches_per_sec"] = static_cast<double>(win_batches_) / win_seconds_;
  if (opt_.length_fn) {
    const double tps = static_cast<double>(win_tokens_) / win_seconds_;
    m["throughput/device/tokens_per_sec"] = tps;
    m["throughput/tokens_per_sec"] = tps * world_;
  }
  m["throughput/device/flops_per_sec"] = flops / win_seconds_;
  if (peak_ > 0) m["throughput/device/mfu"] = flops / win_seconds_ / peak_;
  trainer.log_metrics(m);
  last_metrics_ = m;
  win_seconds_ = 0;
  win_samples_ = win_batches_ = win_tokens_ = 0;
  win_flops_start_ = counted;
  flops_excluded_ = 0;
}

double ThroughputMonitor::seconds() const {
  return seconds_ + (running_ ? std::chrono::duration<double>(last_ - start_).count() : 0.0);
}

void ThroughputMonitor::flush() {
  if (running_) seconds_ += std::chrono::duration<double>(last_ - start_).count();
  running_ = false;
}

nlohmann::json ThroughputMonitor::state_dict() const {
  return {{"samples", samples_}, {"tokens", tokens_}, {"seconds", seconds()}};
}

namespace {
// A count as a checkpoint holds it: an integer >= 0 (unsigned after a JSON round trip, signed when the state is
// passed on directly).
bool is_count(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
  return v.is_number_integer() && v.get<int64_t>() >= 0;
}
}  // namespace

void ThroughputMonitor::load_state_dict(const nlohmann::json& s) {
  VOLT_CHECK(s.is_object() && s.contains("samples") && s.contains("seconds") && is_count(s["samples"]) &&
                 s["seconds"].is_number() && s["seconds"].get<double>() >= 0 &&
                 std::isfinite(s["seconds"].get<double>()),
             "ThroughputMonitor.load_state_dict: expected {\"samples\": integer >= 0, \"seconds\": number >= 0}, got ",
             s.dump());
  samples_ = s["samples"].get<int64_t>();
  seconds_ = s["seconds"].get<double>();
  // "tokens" came with length_fn: a checkpoint written before it has none (counted from 0).
  tokens_ = 0;
  if (s.contains("tokens")) {
    VOLT_CHECK(is_count(s["tokens"]), "ThroughputMonitor.load_state_dict: \"tokens\" must be an integer >= 0, got ",
               s["tokens"].dump());
    tokens_ = s["tokens"].get<int64_t>();
  }
  running_ = false;
}

}  // namespace volt
