#pragma once
/// @file
/// CSVLogger: `<root>/<name>/version_N/metrics.csv` and hparams.yaml (N: the next free version number, found when
/// the logger is first used; see VersionedLogDir in trainer/loggers/logger.h).
///
/// Each log_metrics call is one row; the columns are the sorted union of every metric name seen plus "epoch" and
/// "step" (cells a row does not have stay empty). metrics.csv is written on save() and finalize(), and from
/// log_metrics once `flush_logs_every_n_steps` steps have passed since the last write: a long epoch can be
/// watched while it runs, and a crash loses at most the rows of that many steps. The first write, and any write
/// after a new column appeared, replaces the file atomically (runtime/atomic_file.h) with every row so far;
/// otherwise the new rows are appended in one write, so saved rows are never rewritten or touched (a process
/// killed inside that write can leave a partial last line without its newline, which scripts/plot_metrics.py
/// skips).
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <volt/trainer/loggers/logger.h>

namespace volt {

struct CSVLoggerOptions {
  std::string name = "lightning_logs";      ///< the experiment folder under the root directory
  int version = -1;                         ///< -1: the next free version_N
  int64_t flush_logs_every_n_steps = 100;   ///< >= 1 (upstream's default)
};

class CSVLogger : public Logger {
 public:
  explicit CSVLogger(std::string root_dir, CSVLoggerOptions options = {});
  std::string name() const override { return dir_.name(); }
  int version() const override { return dir_.version(); }
  std::string log_dir() const override { return dir_.path(); }

  /// One row. `metrics` usually carries "epoch"; `step` fills the "step" column.
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  /// Writes hparams.yaml (a flat YAML rendering of the JSON object).
  void log_hyperparams(const nlohmann::json& hparams) override;
  /// Brings metrics.csv up to date: appends the new rows, or rewrites it atomically when the columns changed.
  void save() override;
  const std::vector<std::map<std::string, double>>& rows() const { return rows_; }

 private:
  VersionedLogDir dir_;
  int64_t flush_every_;
  std::vector<std::map<std::string, double>> rows_;
  std::set<std::string> cols_;          ///< every column so far (sorted)
  std::set<std::string> written_cols_;  ///< the header on disk
  size_t written_rows_ = 0;             ///< rows on disk
  uintmax_t written_bytes_ = 0;         ///< the file's size after our last write
  bool dirty_ = false;
  int64_t saved_step_ = -1;  ///< the step of the last row written by save()
  std::string format_rows(size_t from) const;
};

}  // namespace volt
