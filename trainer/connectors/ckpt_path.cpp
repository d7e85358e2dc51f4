// Trainer::resolve_ckpt_path: what fit/validate/test/predict(..., ckpt_path) mean by "last" and "best".
#include <sstream>

#include <volt/nn/serialization.h>
#include <volt/trainer/checkpoint/files.h>
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

// best_model_path of a ModelCheckpoint state read from `file`: untrusted, so it must lie inside the state's
// dirpath and, links followed, inside one of the directories searched.
std::string recorded_best_path(const nlohmann::json& state, const std::string& file, const std::string& key,
                               const std::vector<std::string>& dirs) {
  const auto text = [&](const char* k) {
    return state.is_object() && state.contains(k) && state.at(k).is_string() ? state.at(k).get<std::string>()
                                                                              : std::string();
  };
  const std::string best = text("best_model_path"), dir = text("dirpath");
  if (best.empty()) return best;
  bool searched = false;
  for (const auto& d : dirs) searched = searched || path_resolves_within(best, d);
  VOLT_CHECK(path_lexically_within(best, dir) && searched, "Trainer: ckpt_path=\"best\": checkpoint ", file,
             ": callbacks[\"", key, "\"] key \"best_model_path\" names \"", best, "\", which lies outside ",
             dir.empty() ? std::string("its (empty or missing) dirpath") : "its dirpath \"" + dir + "\"",
             " or outside the checkpoint directories searched; pass a checkpoint path instead");
  return best;
}

}  // namespace

std::string Trainer::resolve_ckpt_path(const std::string& ckpt_path) {
  if (ckpt_path != "last" && ckpt_path != "best") return ckpt_path;
  // Rank 0 looks at the file system and decides; errors are raised on every rank alike.
  std::string found, error;
  bool no_monitor = false;
  if (strategy_->is_global_zero()) {
    try {
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
                found = recorded_best_path(j.at("callbacks").at(key), newest + ".json", key, dirs);
            }
          }
        } else {
          no_monitor = true;
        }
      }
    } catch (const Error& e) {
      error = e.what();  // raised below on every rank, not only here
    }
  }
  error = strategy_->broadcast_string(error, 0);
  VOLT_CHECK(error.empty(), error);
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
