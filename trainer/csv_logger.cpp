#include "trainer/csv_logger.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "runtime/atomic_file.h"
#include "runtime/error.h"

namespace volt {

namespace fs = std::filesystem;

CSVLogger::CSVLogger(std::string root_dir, CSVLoggerOptions options)
    : dir_(std::move(root_dir), std::move(options.name), options.version, "CSVLogger"),
      flush_every_(options.flush_logs_every_n_steps) {
  VOLT_CHECK(flush_every_ >= 1, "CSVLogger: flush_logs_every_n_steps=", flush_every_, " must be >= 1");
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  rows_.push_back(std::move(row));
  dirty_ = true;
  // A step below the last written one is a new run on this logger (fit after fit): it restarts the count.
  if (step - saved_step_ >= flush_every_ || step < saved_step_) save();
}

static std::string fmt(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void CSVLogger::save() {
  const std::string& dir = dir_.create();
  const std::string path = (fs::path(dir) / "metrics.csv").string();
  if (!dirty_ && fs::exists(path)) return;
  std::set<std::string> cols;
  for (auto& r : rows_)
    for (auto& [k, v] : r) cols.insert(k);
  std::ostringstream os;
  bool first = true;
  for (auto& c : cols) { os << (first ? "" : ",") << c; first = false; }
  os << "\n";
  for (auto& r : rows_) {
    first = true;
    for (auto& c : cols) {
      if (!first) os << ",";
      first = false;
      auto it = r.find(c);
      if (it != r.end()) os << fmt(it->second);
    }
    os << "\n";
  }
  atomic_write_file(path, os.str());
  dirty_ = false;
  if (!rows_.empty()) saved_step_ = static_cast<int64_t>(rows_.back().at("step"));
}

void CSVLogger::log_hyperparams(const nlohmann::json& hparams) { write_hparams_yaml(dir_.create(), hparams); }

}  // namespace volt
