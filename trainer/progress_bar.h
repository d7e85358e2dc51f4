#pragma once
/// @file
/// Console progress for fit/validate/test. On a terminal: one live line redrawn in place:
/// @code{.unparsed}
///   Epoch 0:  42%|########        | 1450/3438 [00:01<00:02, 1210.5it/s, loss=0.412, val_acc=0.851]
/// @endcode
/// When output is not a terminal (logs, CI): a plain line every 10% of the stage, and one at the end, so logs
/// stay readable. Only rank 0 prints (the trainer disables the bar elsewhere).
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

namespace volt {

class ProgressBar {
 public:
  /// `interactive`: redraw in place; by default decided by whether stdout is a terminal.
  explicit ProgressBar(std::ostream* out = nullptr, int interactive = -1);
  void set_enabled(bool enabled) { enabled_ = enabled; }
  /// The logger's version, shown first as "v_num=N" (< 0: none).
  void set_version(int version) { version_ = version; }
  bool enabled() const { return enabled_; }
  bool interactive() const { return interactive_; }

  /// stage: "Epoch 3", "Validation", "Testing", "Sanity Checking", "Predicting"; total may be -1 (unknown).
  void start(const std::string& stage, int64_t total_batches, int64_t epoch = -1);
  /// Called after each batch (batch_idx counts from 0). Metrics appear as name=value, after it/s.
  void update(int64_t batch_idx, const std::map<std::string, double>& prog_bar_metrics = {});
  /// Ends the stage (a final line with the last metrics).
  void finish(const std::map<std::string, double>& prog_bar_metrics = {});
  /// True when update() would draw now (lets callers skip reading device values otherwise).
  bool wants_refresh(int64_t batch_idx) const;

  /// The formatted line for the given state (exposed for tests).
  static std::string format_line(const std::string& stage, int64_t done, int64_t total, double elapsed_s,
                                 const std::map<std::string, double>& metrics, int bar_width = 20);

 private:
  void draw(bool final_line);
  std::ostream* out_;
  bool interactive_;
  bool enabled_ = true;
  int version_ = -1;
  std::string stage_;
  int64_t total_ = -1;
  int64_t done_ = 0;
  int64_t next_line_at_ = 0;
  std::map<std::string, double> metrics_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool active_ = false;
};

}  // namespace volt
