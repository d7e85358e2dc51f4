#include <volt/trainer/checkpoint/locate.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <tuple>

#include <volt/nn/file_digest.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/error.h>

namespace volt {

namespace fs = std::filesystem;

void verify_checkpoint_weights(const std::string& stem, const nlohmann::json& record) {
  if (!record.contains("safetensors_digest")) return;
  nn::verify_file_digest(stem + ".safetensors",
                         nn::digest_from_json(record.at("safetensors_digest"), stem + ".json"));
}

std::vector<std::string> default_checkpoint_dirs(const std::string& default_root_dir) {
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  fs::path logs = fs::path(default_root_dir) / "lightning_logs";
  for (fs::directory_iterator it(logs, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("version_", 0) != 0) continue;
    char* rest = nullptr;
    long v = std::strtol(n.c_str() + 8, &rest, 10);
    if (rest == n.c_str() + 8 || *rest != '\0') continue;
    fs::path ck = it->path() / "checkpoints";
    if (fs::is_directory(ck, ec)) found.emplace_back(v, ck.string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  // Without a logger, a ModelCheckpoint writes to <root>/checkpoints (Trainer::log_dir() is the root).
  const fs::path no_logger = fs::path(default_root_dir) / "checkpoints";
  if (fs::is_directory(no_logger, ec)) out.push_back(no_logger.string());
  for (auto& [v, d] : found) out.push_back(d);
  return out;
}

std::string newest_checkpoint(const std::vector<std::string>& dirs) {
  std::string best;
  std::tuple<fs::file_time_type, int64_t> best_key{};
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path p = it->path();
      if (p.extension() != ".json" || p.filename().string().front() == '.') continue;
      const std::string stem = (p.parent_path() / p.stem()).string();
      std::error_code e2;
      if (!fs::exists(stem + ".safetensors", e2)) continue;
      const auto mtime = fs::last_write_time(p, e2);
      if (e2) continue;  // deleted while we looked (a rotating top-k)
      nlohmann::json j;
      try {
        j = nn::load_json(p.string());
      } catch (const Error&) {
        continue;  // not ours, or deleted while we looked
      }
      if (!j.is_object() || j.value("format", "") != "volt-checkpoint") continue;
      const auto key = std::make_tuple(mtime, j.value("global_step", int64_t{0}));
      if (best.empty() || key > best_key) {
        best = stem;
        best_key = key;
      }
    }
  }
  return best;
}

}  // namespace volt
