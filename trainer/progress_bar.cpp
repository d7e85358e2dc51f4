#include <volt/trainer/progress_bar.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace volt {

namespace {
std::string clock_str(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  std::ostringstream os;
  os << std::setfill('0');
  if (t >= 3600) os << t / 3600 << ":";
  os << std::setw(2) << (t / 60) % 60 << ":" << std::setw(2) << t % 60;
  return os.str();
}

std::string metric_str(double v) {
  std::ostringstream os;
  double a = std::fabs(v);
  if (v == std::floor(v) && a < 1e9) os << static_cast<int64_t>(v);
  else if (a != 0 && (a < 1e-3 || a >= 1e5)) os << std::scientific << std::setprecision(3) << v;
  else os << std::fixed << std::setprecision(3) << v;
  return os.str();
}
}  // namespace

ProgressBar::ProgressBar(std::ostream* out, int interactive) : out_(out ? out : &std::cout) {
  interactive_ = interactive >= 0 ? interactive != 0 : (out == nullptr && isatty(STDOUT_FILENO));
}

std::string ProgressBar::format_line(const std::string& stage, int64_t done, int64_t total, double elapsed_s,
                                     const std::map<std::string, double>& metrics, int bar_width) {
  std::ostringstream os;
  os << stage << ": ";
  double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  if (total > 0) {
    double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    int filled = static_cast<int>(frac * bar_width);
    os << std::setw(3) << static_cast<int>(frac * 100) << "%|" << std::string(filled, '#')
       << std::string(bar_width - filled, ' ') << "| " << done << "/" << total;
    double eta = rate > 0 ? static_cast<double>(total - done) / rate : NAN;
    os << " [" << clock_str(elapsed_s) << "<" << clock_str(eta);
  } else {
    os << done << " [" << clock_str(elapsed_s);
  }
  os << ", " << std::fixed << std::setprecision(rate >= 100 ? 1 : 2) << rate << "it/s";
  // "v_num" (the logger's version) first, then the metrics by name.
  if (auto it = metrics.find("v_num"); it != metrics.end()) os << ", v_num=" << metric_str(it->second);
  for (const auto& [k, v] : metrics)
    if (k != "v_num") os << ", " << k << "=" << metric_str(v);
  os << "]";
  return os.str();
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
