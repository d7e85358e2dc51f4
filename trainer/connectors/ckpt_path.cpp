// Trainer::resolve_ckpt_path: what fit/validate/test/predict(..., ckpt_path) mean by "last" and "best".
#include <sstream>

#include <volt/nn/serialization.h>
#include <volt/trainer/checkpoint/locate.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

namespace volt {

namespace {

// The dirpaths the ModelCheckpoint callbacks were given explicitly.
std::vector<std::string> configured_dirs(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::vector<std::string> dirs;
  for (auto& c : callbacks)
    if (auto* mc = dynamic_cast<ModelCheckpoint*>(c.get()); mc && !mc->options().dirpath.empty())
      dirs.push_back(mc->options().dirpath);
  return dirs;
}

std::vector<std::string> search_dirs(const std::vector<std::shared_ptr<Callback>>& callbacks,
                                     const std::string& root) {
  std::vector<std::string> dirs = configured_dirs(callbacks);
  for (auto& d : default_checkpoint_dirs(root)) dirs.push_back(d);
  return dirs;
}

std::string where(const std::vector<std::shared_ptr<Callback>>& callbacks, const std::string& root) {
  std::ostringstream os;
  for (auto& d : configured_dirs(callbacks)) os << d << ", ";
  os << root << "/checkpoints, " << root << "/lightning_logs/version_*/checkpoints";
  return os.str();
}

}  // namespace

std::string Trainer::resolve_ckpt_path(const std::string& ckpt_path) {
  if (ckpt_path != "last" && ckpt_path != "best") return ckpt_path;
  // Rank 0 looks at the file system and decides; errors are raised on every rank alike.
  std::string found;
  bool no_monitor = false;
  if (strategy_->is_global_zero()) {
    const auto dirs = search_dirs(callbacks_, opt_.default_root_dir);
    if (ckpt_path == "last") {
      found = newest_checkpoint(dirs);
    } else {
      ModelCheckpoint* mc = nullptr;
      for (auto& c : callbacks_)
        if (auto* m = dynamic_cast<ModelCheckpoint*>(c.get()); m && !m->options().monitor.empty()) {
          mc = m;
          break;
        }
      if (mc) {
        found = mc->best_model_path();
        if (found.empty()) {  // a fresh trainer: the newest checkpoint's record of this callback knows
          const std::string newest = newest_checkpoint(dirs);
          if (!newest.empty()) {
            const nlohmann::json j = nn::load_json(newest + ".json");
            const std::string key = mc->state_key();
            if (j.contains("callbacks") && j.at("callbacks").contains(key))
              found = j.at("callbacks").at(key).value("best_model_path", std::string());
          }
        }
      } else {
        no_monitor = true;
      }
    }
  }
  found = strategy_->broadcast_string(found, 0);
  no_monitor = strategy_->reduce_decision(no_monitor, /*all=*/false);
  VOLT_CHECK(!no_monitor, "Trainer: ckpt_path=\"best\" needs a ModelCheckpoint with a monitor (the best "
             "checkpoint is ranked by it); none is configured. Pass \"last\" or a checkpoint path instead");
  VOLT_CHECK(!found.empty(), "Trainer: ckpt_path=\"", ckpt_path, "\" but ",
             ckpt_path == "last" ? "no complete checkpoint (a .json record with its .safetensors) was found in "
                                 : "no best checkpoint has been saved yet; searched ",
             where(callbacks_, opt_.default_root_dir));
  return found;
}

}  // namespace volt
