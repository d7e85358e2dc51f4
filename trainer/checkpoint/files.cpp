#include <volt/trainer/checkpoint/files.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <volt/runtime/error.h>
#include <volt/runtime/process.h>
#include <volt/trainer/checkpoint/sharded.h>

namespace volt {

namespace fs = std::filesystem;

namespace {

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// True when `path` is a safetensors file whose header metadata says a Trainer wrote it.
bool is_volt_checkpoint_tensors(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return false;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n == 0 || n > (uint64_t{64} << 20)) return false;
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return false;
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("__metadata__") || !j["__metadata__"].is_object()) return false;
  const auto& m = j["__metadata__"];
  return m.contains("format") && m["format"] == "volt-checkpoint";
}

// A sharded checkpoint's `<stem>.shards` folder without `<stem>.json` (killed before the record), old enough and
// holding nothing but rank files and temp files.
bool is_orphan_shards_dir(const fs::directory_entry& e, fs::file_time_type now, std::chrono::seconds min_age) {
  std::error_code ec;
  const fs::path p = e.path();
  if (!e.is_directory(ec) || e.is_symlink(ec) || p.extension() != ".shards") return false;
  fs::path record = p;
  record.replace_extension(".json");
  if (fs::exists(record, ec) || ec) return false;
  const auto mtime = fs::last_write_time(p, ec);
  if (ec || now - mtime < min_age) return false;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    int rank = 0, world = 0;
    long pid = 0;
    if (!it->is_regular_file(ec) || !(parse_shard_file_name(f, rank, world) || is_atomic_write_temp_name(f, pid)))
      return false;
  }
  return !ec;
}

// `path` with "." and ".." folded and no trailing separator.
fs::path normal(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

bool normal_within(const fs::path& p, const fs::path& dir) {
  if (p.empty() || dir.empty() || p.is_absolute() != dir.is_absolute()) return false;
  const fs::path rel = p.lexically_relative(dir);
  if (rel.empty() || rel == ".") return false;
  return *rel.begin() != "..";
}

// `path` with the links of its existing parts resolved, except the final component.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(normal(path), ec);
  if (ec) return {};
  if (!p.has_parent_path() || p == p.root_path()) return p;
  const fs::path parent = fs::weakly_canonical(p.parent_path(), ec);
  return ec ? fs::path() : parent / p.filename();
}

bool regular_not_link(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() == fs::file_type::regular && !ec;
}

}  // namespace

bool path_lexically_within(const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty()) return false;
  return normal_within(normal(path), normal(dir));
}

bool path_resolves_within(const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty()) return false;
  std::error_code ec;
  const fs::path d = fs::weakly_canonical(fs::absolute(normal(dir), ec), ec);
  if (ec) return false;
  const fs::path p = resolved(path);
  return !p.empty() && normal_within(p, d);
}

bool same_directory(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ea, eb;
  const fs::path pa = fs::weakly_canonical(fs::absolute(normal(a), ea), ea);
  const fs::path pb = fs::weakly_canonical(fs::absolute(normal(b), eb), eb);
  return !ea && !eb && normal(pa.string()) == normal(pb.string());
}

bool is_volt_checkpoint_pair(const std::string& stem) {
  const fs::path js = stem + ".json", st = stem + ".safetensors";
  if (!regular_not_link(js)) return false;
  std::error_code ec;
  if (fs::symlink_status(st, ec).type() != fs::file_type::not_found && !(regular_not_link(st) &&
                                                                         is_volt_checkpoint_tensors(st)))
    return false;
  std::ifstream in(js, std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("format") && j["format"] == "volt-checkpoint";
}

bool is_atomic_write_temp_name(const std::string& f, long& pid) {
  if (f.size() < 2 || f[0] != '.') return false;
  const size_t last = f.rfind('.');
  if (last == std::string::npos || last == 0 || !all_digits(f.substr(last + 1))) return false;
  const size_t mid = f.rfind('.', last - 1);
  if (mid == std::string::npos || !all_digits(f.substr(mid + 1, last - mid - 1))) return false;
  static const std::string kTmp = ".tmp";
  if (mid < kTmp.size() + 1 || f.compare(mid - kTmp.size(), kTmp.size(), kTmp) != 0) return false;
  pid = std::stol(f.substr(mid + 1, last - mid - 1));
  return mid - kTmp.size() > 1;  // a non-empty <name>
}

void ensure_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  VOLT_CHECK(!dir.empty(), what, " is empty; expected a directory path");
  fs::create_directories(dir, ec);
  VOLT_CHECK(!ec, what, " '", dir, "': cannot create the directory: ", ec.message());
  VOLT_CHECK(fs::is_directory(dir, ec), what, " '", dir, "' is not a directory; expected a directory path");
  const std::string probe = (fs::path(dir) / (".volt_write_test." + std::to_string(::getpid()))).string();
  {
    std::ofstream f(probe);
    f << "ok";
    f.flush();
    VOLT_CHECK(f.good(), what, " '", dir, "': the directory is not writable (creating ", probe, " failed: ",
               std::strerror(errno), ")");
  }
  fs::remove(probe, ec);
}

std::vector<std::string> cleanup_stale_checkpoint_files(const std::string& dir, std::chrono::seconds min_age) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return removed;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (is_orphan_shards_dir(*it, now, min_age)) {
      if (fs::remove_all(it->path(), fec) > 0 && !fec) removed.push_back(it->path().string());
      continue;
    }
    if (!it->is_regular_file(fec) || it->is_symlink(fec)) continue;
    const fs::path p = it->path();
    const auto mtime = fs::last_write_time(p, fec);
    if (fec || now - mtime < min_age) continue;
    const std::string name = p.filename().string();
    long pid = 0;
    bool stale = false;
    if (is_atomic_write_temp_name(name, pid)) {
      stale = !process_running(pid);  // a killed writer (a zombie counts as gone)
    } else if (p.extension() == ".safetensors") {
      fs::path partner = p;
      partner.replace_extension(".json");
      stale = !fs::exists(partner, fec) && !fec && is_volt_checkpoint_tensors(p);
    }
    if (stale && fs::remove(p, fec)) removed.push_back(p.string());
  }
  return removed;
}

}  // namespace volt
