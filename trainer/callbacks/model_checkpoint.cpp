#include <volt/trainer/callbacks/model_checkpoint.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include <volt/trainer/callbacks/interrupt_checkpoint.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/checkpoint/sharded.h>
#include <volt/trainer/trainer.h>

namespace volt {

namespace fs = std::filesystem;

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : opt_(std::move(options)) {
  VOLT_CHECK(opt_.mode == "min" || opt_.mode == "max", "ModelCheckpoint: mode=\"", opt_.mode,
             "\"; expected \"min\" or \"max\"");
  VOLT_CHECK(opt_.save_top_k >= -1, "ModelCheckpoint: save_top_k=", opt_.save_top_k, "; expected -1, 0 or more");
  VOLT_CHECK(opt_.every_n_epochs >= -1, "ModelCheckpoint: every_n_epochs=", opt_.every_n_epochs,
             "; expected -1 (auto), 0 (never) or >= 1");
  VOLT_CHECK(opt_.every_n_train_steps >= 0, "ModelCheckpoint: every_n_train_steps=", opt_.every_n_train_steps,
             "; expected 0 (off) or >= 1");
  VOLT_CHECK(opt_.train_time_interval >= 0 && std::isfinite(opt_.train_time_interval),
             "ModelCheckpoint: train_time_interval=", opt_.train_time_interval, "; expected 0 (off) or seconds > 0");
  const bool step_or_time = opt_.every_n_train_steps > 0 || opt_.train_time_interval > 0;
  every_n_epochs_ = opt_.every_n_epochs == -1 ? (step_or_time ? 0 : 1) : opt_.every_n_epochs;
  VOLT_CHECK(!opt_.filename.empty(), "ModelCheckpoint: filename template is empty");
  best_score_ = std::numeric_limits<double>::quiet_NaN();
}

std::string ModelCheckpoint::state_key() const {
  // Keys of checkpoints written before the step/time triggers existed stay the same.
  std::string key = "ModelCheckpoint{monitor=" + opt_.monitor + ",mode=" + opt_.mode +
                    ",every_n_epochs=" + std::to_string(every_n_epochs_);
  if (opt_.every_n_train_steps > 0) key += ",every_n_train_steps=" + std::to_string(opt_.every_n_train_steps);
  if (opt_.train_time_interval > 0) {
    std::ostringstream t;
    t << opt_.train_time_interval;
    key += ",train_time_interval=" + t.str();
  }
  return key + "}";
}

std::string ModelCheckpoint::format_name(const std::string& tmpl, int64_t epoch, int64_t step,
                                         const std::map<std::string, double>& metrics) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] != '{') {
      out += tmpl[i++];
      continue;
    }
    size_t close = tmpl.find('}', i);
    VOLT_CHECK(close != std::string::npos, "ModelCheckpoint: filename template \"", tmpl, "\" has an unclosed '{'");
    std::string field = tmpl.substr(i + 1, close - i - 1);
    std::string spec;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (field == "epoch") {
      out += std::to_string(epoch);
    } else if (field == "step") {
      out += std::to_string(step);
    } else {
      auto it = metrics.find(field);
      VOLT_CHECK(it != metrics.end(), "ModelCheckpoint: filename template uses {", field,
                 "} but no metric of that name was logged");
      char buf[64];
      std::string fmt(1, '%');
      fmt.append(spec.empty() ? std::string(".4f") : spec);
      std::snprintf(buf, sizeof(buf), fmt.c_str(), it->second);
      out += buf;
    }
    i = close + 1;
  }
  return out;
}

bool ModelCheckpoint::epoch_due(const Trainer& trainer) const {
  return every_n_epochs_ > 0 && (trainer.current_epoch() + 1) % every_n_epochs_ == 0;
}

void ModelCheckpoint::on_fit_start(Trainer& trainer, TrainModule&) {
  last_time_save_ = std::chrono::steady_clock::now();
  step_save_at_epoch_end_ = false;
  if (!restored_) return;
  restored_ = false;
  // A restored state names files this run may later delete: settle now, before any training, whether they lie
  // in this run's directory. Rank 0 looks at the file system; every rank raises its verdict.
  resolve_dir(trainer);
  std::string problem;
  if (trainer.strategy().is_global_zero()) {
    auto check = [&](const std::string& key, const std::string& path) {
      if (problem.empty() && !path.empty() && !path_resolves_within(path, dir_))
        problem = "ModelCheckpoint: the restored state's " + key + " \"" + path + "\" resolves (following links) " +
                  "outside the checkpoint directory \"" + dir_ + "\"; refusing a record that names files elsewhere";
    };
    for (auto& [k, v] : best_k_) check("best_k_models entry", k);
    check("latest_path", latest_path_);
    check("last_model_path", last_path_);
  }
  problem = trainer.strategy().broadcast_string(problem, 0);
  VOLT_CHECK(problem.empty(), problem);
}

void ModelCheckpoint::on_validation_end(Trainer& trainer, TrainModule&) {
  if (epoch_due(trainer)) save(trainer);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  const bool deferred = step_save_at_epoch_end_;
  step_save_at_epoch_end_ = false;
  if (deferred || (!trainer.has_validation() && epoch_due(trainer))) save(trainer);
}

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const Batch&,
                                         int64_t batch_idx) {
  // Only after an optimizer step: checkpoints do not hold gradients accumulated towards the next one.
  if ((batch_idx + 1) % trainer.options().accumulate_grad_batches != 0 && !trainer.is_last_batch()) return;
  const int64_t step = trainer.global_step();
  bool due = opt_.every_n_train_steps > 0 && step > 0 && step % opt_.every_n_train_steps == 0 &&
             step != last_saved_step_;
  if (opt_.train_time_interval > 0) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_time_save_).count();
    // Clocks differ per rank: any rank past the interval decides for all.
    due = trainer.strategy().reduce_decision(el >= opt_.train_time_interval, /*all=*/false) || due;
  }
  if (!due) return;
  // On the epoch's last batch the epoch-end work (epoch schedulers, validation) has not run yet; a checkpoint
  // here would resume past it. Save at the epoch end instead.
  if (trainer.is_last_batch()) step_save_at_epoch_end_ = true;
  else save(trainer);
}

void ModelCheckpoint::on_interrupt(Trainer& trainer, TrainModule&) {
  // A preemption (trainer/callbacks/preemption.h) writes its own checkpoint of this same state: one write, not
  // two, inside the scheduler's grace period. Every rank holds the same callbacks, so every rank asks.
  for (auto& c : trainer.callbacks())
    if (auto* w = dynamic_cast<InterruptCheckpointWriter*>(c.get()); w && w->writes_interrupt_checkpoint(trainer))
      return;
  trainer.save_checkpoint((fs::path(resolve_dir(trainer)) / "interrupted").string());
}

const std::string& ModelCheckpoint::resolve_dir(Trainer& trainer) {
  if (!dir_.empty()) return dir_;
  dir_ = opt_.dirpath.empty() ? (fs::path(trainer.log_dir()) / "checkpoints").string() : opt_.dirpath;
  dir_ = trainer.strategy().broadcast_string(dir_, 0);
  if (trainer.strategy().is_global_zero()) cleanup_stale_checkpoint_files(dir_);  // leftovers of a killed run
  // Resumed into a different directory (a new logger version), or from a record that does not say where its
  // files are: the restored top-k set describes files elsewhere that this run must not delete or rank against;
  // only best_model_path is kept. Rank 0's file system decides.
  bool other_dir = !same_directory(loaded_dir_, dir_);
  other_dir = trainer.strategy().reduce_decision(other_dir, /*all=*/false);
  if (other_dir) {
    best_k_.clear();
    latest_path_.clear();
    last_path_.clear();
  }
  return dir_;
}

void ModelCheckpoint::remove_checkpoint(Trainer& trainer, const std::string& stem) {
  if (!trainer.strategy().is_global_zero() || stem.empty()) return;
  // Only a checkpoint this run can prove is its own: inside its directory (links resolved) and a complete pair
  // of Volt checkpoint files. Anything else (a user's file, a link) stays, and the user hears why.
  if (!path_lexically_within(stem, dir_) || !path_resolves_within(stem, dir_) || !is_volt_checkpoint_pair(stem)) {
    std::cerr << "ModelCheckpoint: not deleting the displaced checkpoint \"" << stem
              << "\": it is not a Volt checkpoint inside \"" << dir_ << "\"\n";
    return;
  }
  std::error_code ec;
  fs::remove(stem + ".json", ec);  // the record first: a half-deleted checkpoint is never "valid"
  fs::remove(stem + ".safetensors", ec);
  remove_shards_dir(stem);  // a sharded checkpoint's rank files (checkpoint_layout = sharded)
}

std::string ModelCheckpoint::worst_key() const {
  std::string worst;
  double w = 0;
  for (auto& [k, v] : best_k_)
    if (worst.empty() || better(w, v) || std::isnan(v)) { worst = k; w = v; }
  return worst;
}

namespace {

// The checkpoint's file name from the template. A template naming a metric that one rank lacks (logged with
// rank_zero_only) fails on every rank together, instead of leaving the others waiting in the collectives that
// follow. (collective)
std::string checkpoint_name(Trainer& trainer, const std::string& tmpl, const MetricMap& metrics) {
  std::string name, name_error;
  try {
    name = ModelCheckpoint::format_name(tmpl, trainer.current_epoch(), trainer.global_step(), metrics);
  } catch (const Error& e) {
    name_error = e.what();
  }
  if (trainer.strategy().reduce_decision(!name_error.empty(), /*all=*/false)) {
    if (!name_error.empty()) VOLT_FAIL(name_error);
    VOLT_FAIL("ModelCheckpoint: the filename template \"", tmpl, "\" could not be filled on another rank "
              "(a metric it names was not logged there)");
  }
  return name;
}

// `stem`, or when a checkpoint not in `best_k` already has that name, the first free "<stem>-v<n>"; rank 0's
// view of the directory decides. (collective)
std::string unused_stem(Trainer& trainer, std::string stem, const std::map<std::string, double>& best_k) {
  if (best_k.count(stem) == 0 && fs::exists(stem + ".json")) {
    for (int v = 1;; ++v) {
      std::string s = stem + "-v" + std::to_string(v);
      if (!fs::exists(s + ".json")) { stem = s; break; }
    }
  }
  return trainer.strategy().broadcast_string(stem, 0);
}

// The monitored metric's value, agreed by every rank; NaN ranks worst (+inf for mode "min", -inf for "max").
// A metric that was not logged fails naming the metrics there are. (collective)
double monitored_value(Trainer& trainer, const MetricMap& metrics, const ModelCheckpointOptions& opt) {
  auto it = metrics.find(opt.monitor);
  std::optional<double> agreed =
      trainer.strategy().agreed_value(it != metrics.end() ? std::optional<double>(it->second) : std::nullopt);
  if (!agreed) {
    std::ostringstream avail;
    for (auto& [k, v] : metrics) avail << " " << k;
    VOLT_FAIL("ModelCheckpoint: the monitored metric \"", opt.monitor, "\" was not logged; available metrics:",
              avail.str());
  }
  double v = *agreed;
  if (std::isnan(v)) v = opt.mode == "min" ? std::numeric_limits<double>::infinity()
                                           : -std::numeric_limits<double>::infinity();
  return v;
}

}  // namespace

void ModelCheckpoint::save(Trainer& trainer) {
  if (trainer.sanity_checking() || (opt_.save_top_k == 0 && !opt_.save_last)) return;
  if (trainer.global_step() == last_saved_step_) return;  // already saved at this step
  resolve_dir(trainer);
  MetricMap metrics = trainer.callback_metrics();
  last_saved_step_ = trainer.global_step();
  last_time_save_ = std::chrono::steady_clock::now();
  const std::string stem = (fs::path(dir_) / checkpoint_name(trainer, opt_.filename, metrics)).string();

  if (opt_.save_top_k != 0 && opt_.monitor.empty()) {
    const std::string path = unused_stem(trainer, stem, best_k_);
    // Bookkeeping first, so the checkpoint's own callback state already lists it; the displaced file is
    // deleted only after the new one is complete.
    std::string displaced;
    if (opt_.save_top_k == 1 && !latest_path_.empty() && latest_path_ != path) {
      displaced = latest_path_;
      best_k_.erase(latest_path_);
    }
    best_k_[path] = std::numeric_limits<double>::quiet_NaN();
    latest_path_ = best_path_ = path;
    trainer.save_checkpoint(path);
    remove_checkpoint(trainer, displaced);
  } else if (opt_.save_top_k != 0) {
    const double v = monitored_value(trainer, metrics, opt_);
    bool keep = opt_.save_top_k == -1 || static_cast<int64_t>(best_k_.size()) < opt_.save_top_k;
    std::string worst;
    if (!keep) {
      worst = worst_key();
      keep = better(v, best_k_.at(worst));
    }
    if (keep) {
      const std::string path = unused_stem(trainer, stem, best_k_);
      std::string displaced;
      if (!worst.empty() && worst != path) {
        displaced = worst;
        best_k_.erase(worst);
      }
      best_k_[path] = v;
      best_path_.clear();
      for (auto& [k, s] : best_k_)
        if (best_path_.empty() || better(s, best_score_)) { best_path_ = k; best_score_ = s; }
      trainer.save_checkpoint(path);
      remove_checkpoint(trainer, displaced);
    }
  }
  if (opt_.save_last) {
    last_path_ = (fs::path(dir_) / "last").string();
    trainer.save_checkpoint(last_path_);
  }
}

nlohmann::json ModelCheckpoint::state_dict() const {
  nlohmann::json bk = nlohmann::json::object();
  for (auto& [k, v] : best_k_) bk[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  return {{"dirpath", dir_}, {"best_model_path", best_path_},
          {"best_model_score", std::isfinite(best_score_) ? nlohmann::json(best_score_) : nlohmann::json(nullptr)},
          {"best_k_models", bk}, {"last_model_path", last_path_}, {"latest_path", latest_path_}};
}

void ModelCheckpoint::load_state_dict(const nlohmann::json& s) {
  VOLT_CHECK(s.is_object(), "ModelCheckpoint: the state is a JSON ", s.type_name(), "; expected an object");
  auto text = [&](const char* key) {
    if (!s.contains(key)) return std::string();
    VOLT_CHECK(s.at(key).is_string(), "ModelCheckpoint: key \"", key, "\" is a JSON ", s.at(key).type_name(),
               "; expected a path string");
    return s.at(key).get<std::string>();
  };
  const std::string dir = text("dirpath");
  // Every path must lie inside the recorded directory; a record without one names no files at all. (Whether
  // that directory is this run's, and where links lead, is settled at fit start: see on_fit_start.)
  auto inside = [&](const std::string& key, const std::string& path) {
    if (path.empty()) return;
    VOLT_CHECK(!dir.empty(), "ModelCheckpoint: key \"", key, "\" names \"", path, "\" but \"dirpath\" is ",
               s.contains("dirpath") ? "empty" : "missing", "; expected a record that names its checkpoint directory");
    VOLT_CHECK(path_lexically_within(path, dir), "ModelCheckpoint: key \"", key, "\" names \"", path,
               "\", which lies outside the recorded checkpoint directory \"", dir, "\" (dirpath)");
  };
  std::map<std::string, double> best_k;
  if (s.contains("best_k_models")) {
    const auto& bk = s.at("best_k_models");
    VOLT_CHECK(bk.is_object(), "ModelCheckpoint: key \"best_k_models\" is a JSON ", bk.type_name(),
               "; expected an object of path -> score");
    for (auto& [k, v] : bk.items()) {
      inside("best_k_models", k);
      VOLT_CHECK(!k.empty(), "ModelCheckpoint: key \"best_k_models\" has an empty path");
      VOLT_CHECK(v.is_number() || v.is_null(), "ModelCheckpoint: best_k_models[\"", k, "\"] is a JSON ",
                 v.type_name(), "; expected a score (a number, or null)");
      best_k[k] = v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
    }
  }
  const std::string best = text("best_model_path"), last = text("last_model_path"), latest = text("latest_path");
  inside("best_model_path", best);
  inside("last_model_path", last);
  inside("latest_path", latest);
  VOLT_CHECK(!s.contains("best_model_score") || s.at("best_model_score").is_number() ||
                 s.at("best_model_score").is_null(),
             "ModelCheckpoint: key \"best_model_score\" is a JSON ", s.at("best_model_score").type_name(),
             "; expected a number or null");
  loaded_dir_ = dir;
  dir_.clear();
  best_path_ = best;
  last_path_ = last;
  latest_path_ = latest;
  best_score_ = s.contains("best_model_score") && s.at("best_model_score").is_number()
                    ? s.at("best_model_score").get<double>()
                    : std::numeric_limits<double>::quiet_NaN();
  best_k_ = std::move(best_k);
  restored_ = true;
}

}  // namespace volt
