#include <volt/trainer/loggers/logger.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <volt/runtime/atomic_file.h>
#include <volt/runtime/error.h>
#include <volt/trainer/checkpoint/files.h>

namespace volt {

namespace fs = std::filesystem;

const char* to_string(RunStatus status) {
  switch (status) {
    case RunStatus::success: return "success";
    case RunStatus::failed: return "failed";
    case RunStatus::interrupted: return "interrupted";
  }
  return "unknown";
}

VersionedLogDir::VersionedLogDir(std::string root_dir, std::string name, int version, std::string owner)
    : root_(std::move(root_dir)), name_(std::move(name)), owner_(std::move(owner)), version_(version) {
  VOLT_CHECK(!root_.empty(), owner_, ": the root directory is empty; expected a directory path");
  VOLT_CHECK(version >= -1, owner_, ": version=", version, "; expected -1 (the next free version) or >= 0");
}

void VersionedLogDir::resolve() const {
  if (!path_.empty()) return;
  const fs::path base = name_.empty() ? fs::path(root_) : fs::path(root_) / name_;
  if (version_ < 0) {
    int next = 0;
    std::error_code ec;
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.rfind("version_", 0) != 0 || !it->is_directory(ec)) continue;
      char* rest = nullptr;
      const long v = std::strtol(n.c_str() + 8, &rest, 10);
      if (rest == n.c_str() + 8 || *rest != '\0' || v < 0 || v >= (1L << 30)) continue;
      next = std::max(next, static_cast<int>(v) + 1);
    }
    version_ = next;
  }
  path_ = (base / ("version_" + std::to_string(version_))).string();
}

int VersionedLogDir::version() const {
  resolve();
  return version_;
}

const std::string& VersionedLogDir::path() const {
  resolve();
  return path_;
}

const std::string& VersionedLogDir::create() {
  resolve();
  if (!created_) {
    ensure_writable_dir(path_, owner_ + ": log directory");
    created_ = true;
  }
  return path_;
}

namespace {

void yaml(std::ostringstream& os, const nlohmann::json& j, int indent) {
  const std::string pad(indent, ' ');
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_object() && !it->empty()) {
      os << pad << it.key() << ":\n";
      yaml(os, *it, indent + 2);
    } else {
      os << pad << it.key() << ": " << it->dump() << "\n";
    }
  }
}

}  // namespace

void write_hparams_yaml(const std::string& dir, const nlohmann::json& hparams) {
  std::ostringstream os;
  if (hparams.is_object() && !hparams.empty()) yaml(os, hparams, 0);
  else os << "{}\n";
  atomic_write_file((fs::path(dir) / "hparams.yaml").string(), os.str());
}

}  // namespace volt
