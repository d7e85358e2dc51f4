#pragma once
// CSVLogger: <root>/lightning_logs/version_N/metrics.csv (N = the next free version number at construction)
// and hparams.yaml. Each log_metrics call is one row; the columns are the sorted union of every metric name
// seen plus "epoch" and "step" (cells a row does not have stay empty). The file is rewritten atomically on
// save() (runtime/atomic_file.h), so a reader, or a run resumed after a crash, never sees a torn file. Only rank 0 constructs a logger.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace volt {

class CSVLogger {
 public:
  explicit CSVLogger(const std::string& root_dir, const std::string& name = "lightning_logs", int version = -1);
  const std::string& log_dir() const { return dir_; }
  int version() const { return version_; }

  // One row. `metrics` usually carries "epoch"; `step` fills the "step" column.
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step);
  // Writes hparams.yaml (a flat YAML rendering of the JSON object).
  void log_hyperparams(const nlohmann::json& hparams);
  // Rewrites metrics.csv with every row so far (atomic).
  void save();
  const std::vector<std::map<std::string, double>>& rows() const { return rows_; }

 private:
  std::string dir_;
  int version_ = 0;
  std::vector<std::map<std::string, double>> rows_;
  bool dirty_ = false;
};

}  // namespace volt
