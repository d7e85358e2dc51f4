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

CSVLogger::CSVLogger(const std::string& root_dir, const std::string& name, int version) {
  fs::path base = fs::path(root_dir) / name;
  if (version < 0) {
    version = 0;
    std::error_code ec;
    if (fs::exists(base, ec)) {
      for (auto& d : fs::directory_iterator(base)) {
        std::string n = d.path().filename().string();
        if (n.rfind("version_", 0) == 0) {
          try {
            version = std::max(version, std::stoi(n.substr(8)) + 1);
          } catch (...) {
          }
        }
      }
    }
  }
  version_ = version;
  dir_ = (base / ("version_" + std::to_string(version))).string();
  fs::create_directories(dir_);
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  rows_.push_back(std::move(row));
  dirty_ = true;
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
  if (!dirty_ && fs::exists(fs::path(dir_) / "metrics.csv")) return;
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
  atomic_write_file((fs::path(dir_) / "metrics.csv").string(), os.str());
  dirty_ = false;
}

static void yaml(std::ostringstream& os, const nlohmann::json& j, int indent) {
  std::string pad(indent, ' ');
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_object()) {
      os << pad << it.key() << ":\n";
      yaml(os, *it, indent + 2);
    } else {
      os << pad << it.key() << ": " << it->dump() << "\n";
    }
  }
}

void CSVLogger::log_hyperparams(const nlohmann::json& hparams) {
  std::ostringstream os;
  if (hparams.is_object() && !hparams.empty()) yaml(os, hparams, 0);
  else os << "{}\n";
  atomic_write_file((fs::path(dir_) / "hparams.yaml").string(), os.str());
}

}  // namespace volt
