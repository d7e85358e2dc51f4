// Trainer checkpoints: <stem>.safetensors holds the module's state_dict and every optimizer's tensors
// ("optimizer.<i>.<key>"); <stem>.json holds the trainer state (loop position, optimizer hyper-state,
// scheduler and callback states, RNG, hparams). The safetensors file is written first and the JSON last, both
// atomically, so a checkpoint whose JSON exists is complete. The JSON records the size and CRC-32 of the
// safetensors file ("safetensors_digest"), verified on load (records from before the digest load unchecked).
#include <filesystem>

#include "nn/serialization.h"
#include "runtime/generator.h"
#include "trainer/checkpoint_files.h"
#include "trainer/trainer.h"

namespace volt {

namespace fs = std::filesystem;

static std::string checkpoint_stem(const std::string& path) {
  for (const char* ext : {".safetensors", ".json"}) {
    std::string e(ext);
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0)
      return path.substr(0, path.size() - e.size());
  }
  return path;
}

void Trainer::save_checkpoint(const std::string& path) {
  VOLT_CHECK(module_ != nullptr, "Trainer::save_checkpoint: no module is attached (call it during fit)");
  std::string stem = checkpoint_stem(path);
  if (strategy_->is_global_zero()) {
    nn::StateDict sd = module_->state_dict();
    nlohmann::json opts = nlohmann::json::array();
    for (size_t i = 0; i < optimizers_.size(); ++i) {
      for (auto& [k, t] : optimizers_[i]->state_dict()) sd.emplace_back("optimizer." + std::to_string(i) + "." + k, t);
      opts.push_back({{"type", optimizers_[i]->type_name()}, {"hyper", optimizers_[i]->hyper_state()}});
    }
    nlohmann::json scheds = nlohmann::json::array();
    for (auto& s : schedulers_)
      scheds.push_back({{"type", s.scheduler->type_name()}, {"interval", s.interval}, {"frequency", s.frequency},
                        {"state", s.scheduler->state_dict()}});
    nlohmann::json cbs = nlohmann::json::object();
    for (auto& c : callbacks_) cbs[c->state_key()] = c->state_dict();
    nlohmann::json j = {
        {"format", "volt-checkpoint"},
        {"version", 1},
        {"epoch", epoch_},
        {"global_step", global_step_},
        {"batches_done", batches_done_},
        {"epoch_batches", num_train_batches_},
        {"optimizers", opts},
        {"schedulers", scheds},
        {"callbacks", cbs},
        {"rng", {{"seed", default_generator().seed()}, {"offset", default_generator().offset()}}},
        {"loader", {{"epoch", epoch_}, {"batches_consumed", batches_done_}}},
        {"hparams", module_->hparams()},
    };
    fs::path p(stem);
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    // The record goes first when overwriting (last, interrupted): a kill between the two renames then leaves
    // an incomplete checkpoint (no JSON), never a torn pair of new weights and an old record.
    fs::remove(stem + ".json");
    nn::FileDigest weights = nn::save_safetensors(stem + ".safetensors", sd, {{"format", "volt-checkpoint"}});
    j["safetensors_digest"] = nn::digest_to_json(weights);
    nn::save_json_atomic(stem + ".json", j);
  }
  strategy_->barrier("save_checkpoint");
}

void Trainer::resume_from(const std::string& path, bool fitting) {
  std::string stem = checkpoint_stem(path);
  bool has_st = fs::exists(stem + ".safetensors"), has_js = fs::exists(stem + ".json");
  VOLT_CHECK(has_st && has_js, "Trainer: checkpoint \"", path, "\" is not a complete Volt checkpoint: ",
             has_st ? "" : stem + ".safetensors is missing", !has_st && !has_js ? " and " : "",
             has_js ? "" : stem + ".json is missing",
             " (a checkpoint needs both files)");
  nlohmann::json j = nn::load_json(stem + ".json");
  VOLT_CHECK(j.value("format", "") == "volt-checkpoint", "Trainer: ", stem, ".json is not a Volt checkpoint record");
  verify_checkpoint_weights(stem, j);
  nn::StateDict all = nn::load_safetensors(stem + ".safetensors");
  nn::StateDict model;
  std::vector<nn::StateDict> opt_sd(optimizers_.size());
  for (auto& [k, t] : all) {
    if (k.rfind("optimizer.", 0) == 0) {
      size_t dot = k.find('.', 10);
      size_t idx = std::stoul(k.substr(10, dot - 10));
      if (fitting) {
        VOLT_CHECK(idx < opt_sd.size(), "Trainer: checkpoint ", stem, " has state for optimizer ", idx,
                   " but configure_optimizers returned ", optimizers_.size());
        opt_sd[idx].emplace_back(k.substr(dot + 1), t);
      }
    } else {
      model.emplace_back(k, t);
    }
  }
  module_->load_state_dict(model, /*strict=*/true);
  if (!fitting) return;

  const auto& opts = j.at("optimizers");
  VOLT_CHECK(opts.size() == optimizers_.size(), "Trainer: checkpoint ", stem, " holds ", opts.size(),
             " optimizers but configure_optimizers returned ", optimizers_.size());
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    VOLT_CHECK(opts[i].at("type").get<std::string>() == optimizers_[i]->type_name(), "Trainer: checkpoint optimizer ",
               i, " is ", opts[i].at("type").get<std::string>(), " but the module configures ",
               optimizers_[i]->type_name());
    optimizers_[i]->load_state_dict(opt_sd[i]);
  }
  const auto& scheds = j.at("schedulers");
  VOLT_CHECK(scheds.size() == schedulers_.size(), "Trainer: checkpoint ", stem, " holds ", scheds.size(),
             " LR schedulers but configure_optimizers returned ", schedulers_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i)
    schedulers_[i].scheduler->load_state_dict(scheds[i].at("state").get<std::map<std::string, double>>());
  // Schedulers re-apply their own lr when loaded; with several on one optimizer the saved group values (what
  // the last scheduler step actually left there) must win, so the hyper-state is restored last.
  for (size_t i = 0; i < optimizers_.size(); ++i)
    optimizers_[i]->load_hyper_state(opts[i].at("hyper").get<std::map<std::string, double>>());
  const auto& cbs = j.at("callbacks");
  for (auto& c : callbacks_)
    if (cbs.contains(c->state_key())) c->load_state_dict(cbs.at(c->state_key()));

  global_step_ = j.at("global_step").get<int64_t>();
  int64_t ep = j.at("epoch").get<int64_t>();
  int64_t done = j.at("batches_done").get<int64_t>();
  int64_t total = j.at("epoch_batches").get<int64_t>();
  if (done >= total) {
    epoch_ = ep + 1;
    resume_skip_ = 0;
  } else {
    epoch_ = ep;
    resume_skip_ = done;
  }
  pending_rng_ = j.at("rng");
}

}  // namespace volt
