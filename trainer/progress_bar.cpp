#include <volt/trainer/progress_bar.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

namespace volt {

namespace {
std::string clock_str(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{:02}:{:02}", t / 60, t % 60);
}

std::string metric_str(double v) {
  const double a = std::fabs(v);
  if (v == std::floor(v) && a < 1e9) return std::to_string(static_cast<int64_t>(v));
  if (a != 0 && (a < 1e-3 || a >= 1e5)) return fmt::format("{:.3e}", v);
  return fmt::format("{:.3f}", v);
}
}  // namespace

ProgressBar::ProgressBar(std::ostream* out, int interactive) : out_(out ? out : &std::cout) {
  interactive_ = interactive >= 0 ? interactive != 0 : (out == nullptr && isatty(STDOUT_FILENO));
}

std::string ProgressBar::format_line(const std::string& stage, int64_t done, int64_t total, double elapsed_s,
                                     const std::map<std::string, double>& metrics, int bar_width) {
  std::string out = stage + ": ";
  auto os = std::back_inserter(out);
  double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  if (total > 0) {
    double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    int filled = static_cast<int>(frac * bar_width);
    double eta = rate > 0 ? static_cast<double>(total - done) / rate : NAN;
    fmt::format_to(os, "{:3}%|{}{}| {}/{} [{}<{}", static_cast<int>(frac * 100), std::string(filled, '#'),
                   std::string(bar_width - filled, ' '), done, total, clock_str(elapsed_s), clock_str(eta));
  } else {
    fmt::format_to(os, "{} [{}", done, clock_str(elapsed_s));
  }
  fmt::format_to(os, ", {:.{}f}it/s", rate, rate >= 100 ? 1 : 2);
  // "v_num" (the logger's version) first, then the metrics by name.
  if (auto it = metrics.find("v_num"); it != metrics.end()) out += ", v_num=" + metric_str(it->second);
  for (const auto& [k, v] : metrics)
    if (k != "v_num") out += ", " + k + "=" + metric_str(v);
  out += "]";
  return out;
}

void ProgressBar::start(const std::string& stage, int64_t total_batches, int64_t epoch) {
  stage_ = epoch >= 0 ? stage + " " + std::to_string(epoch) : stage;
  total_ = total_batches;
  done_ = 0;
  next_line_at_ = total_ > 0 ? std::max<int64_t>(1, total_ / 10) : 100;
  metrics_.clear();
  start_ = last_draw_ = std::chrono::steady_clock::now();
  active_ = true;
}

bool ProgressBar::wants_refresh(int64_t batch_idx) const {
  if (!enabled_ || !active_) return false;
  if (interactive_) return std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(100);
  return batch_idx + 1 >= next_line_at_;
}

void ProgressBar::update(int64_t batch_idx, const std::map<std::string, double>& m) {
  done_ = batch_idx + 1;
  for (const auto& [k, v] : m) metrics_[k] = v;
  if (!wants_refresh(batch_idx)) return;
  if (!interactive_) {
    int64_t step = total_ > 0 ? std::max<int64_t>(1, total_ / 10) : 100;
    while (next_line_at_ <= done_) next_line_at_ += step;
    if (total_ > 0 && done_ >= total_) return;  // finish() prints the last line
  }
  draw(false);
}

void ProgressBar::finish(const std::map<std::string, double>& m) {
  if (!active_) return;
  for (const auto& [k, v] : m) metrics_[k] = v;
  if (enabled_) draw(true);
  active_ = false;
}

void ProgressBar::draw(bool final_line) {
  last_draw_ = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
  std::map<std::string, double> shown = metrics_;
  if (version_ >= 0) shown["v_num"] = version_;
  std::string line = format_line(stage_, done_, total_, elapsed, shown);
  if (interactive_) {
    *out_ << "\r" << line << "\033[K";
    if (final_line) *out_ << "\n";
  } else {
    *out_ << line << "\n";
  }
  out_->flush();
}

}  // namespace volt
