#include <volt/trainer/loggers/csv_logger.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include <volt/runtime/atomic_file.h>
#include <volt/runtime/error.h>

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
  for (const auto& [k, v] : row) cols_.insert(k);
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

std::string CSVLogger::format_rows(size_t from) const {
  std::ostringstream os;
  for (size_t i = from; i < rows_.size(); ++i) {
    bool first = true;
    for (auto& c : cols_) {
      if (!first) os << ",";
      first = false;
      auto it = rows_[i].find(c);
      if (it != rows_[i].end()) os << fmt(it->second);
    }
    os << "\n";
  }
  return os.str();
}

void CSVLogger::save() {
  const std::string& dir = dir_.create();
  const std::string path = (fs::path(dir) / "metrics.csv").string();
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (!dirty_ && exists) return;
  // New rows with the columns already on disk are appended (one write; what was saved is never touched, and a
  // long run does not rewrite its whole history at every flush). A new column, or a file that is not the one
  // this logger wrote, means an atomic rewrite of every row.
  const auto size = exists ? fs::file_size(path, ec) : 0;
  const bool append = exists && !ec && written_rows_ > 0 && written_rows_ <= rows_.size() && cols_ == written_cols_ &&
                      size == written_bytes_;
  if (append) {
    const std::string text = format_rows(written_rows_);
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    VOLT_CHECK(fd >= 0, "CSVLogger: cannot open '", path, "' to append: ", std::strerror(errno));
    try {
      write_all(fd, text.data(), text.size(), "CSVLogger: appending to '" + path + "'");
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    written_bytes_ += text.size();
  } else {
    std::string text;
    bool first = true;
    for (auto& c : cols_) {
      if (!first) text += ',';
      text += c;
      first = false;
    }
    text += "\n" + format_rows(0);
    atomic_write_file(path, text);
    written_bytes_ = text.size();
    written_cols_ = cols_;
  }
  written_rows_ = rows_.size();
  dirty_ = false;
  if (!rows_.empty()) saved_step_ = static_cast<int64_t>(rows_.back().at("step"));
}

void CSVLogger::log_hyperparams(const nlohmann::json& hparams) { write_hparams_yaml(dir_.create(), hparams); }

}  // namespace volt
