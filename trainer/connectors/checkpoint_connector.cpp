// Trainer checkpoints: <stem>.safetensors holds the module's state_dict and every optimizer's tensors
// ("optimizer.<i>.<key>"); <stem>.json holds the trainer state (loop position, optimizer hyper-state,
// scheduler and callback states, RNG, hparams). With checkpoint_layout = sharded under a sharded strategy, the
// optimizers' flat shards go to one file per rank instead (trainer/checkpoint/sharded.h). The safetensors file
// is written first and the JSON last, both atomically, so a checkpoint whose JSON exists is complete. The JSON
// records the size and CRC-32 of the safetensors file ("safetensors_digest"), verified on load (records from
// before the digest load unchecked).
#include <exception>
#include <filesystem>

#include <volt/nn/serialization.h>
#include <volt/runtime/generator.h>
#include <volt/runtime/trace.h>
#include <volt/trainer/callbacks/async_checkpointing.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/checkpoint/locate.h>
#include <volt/trainer/checkpoint/record.h>
#include <volt/trainer/checkpoint/sharded.h>
#include <volt/trainer/checkpoint/sharded_stream.h>
#include <volt/trainer/strategies/fsdp.h>
#include <volt/trainer/trainer.h>

namespace volt {

namespace fs = std::filesystem;

namespace {

// checkpoint_layout = sharded: every rank writes its slices of the optimizers' flat buffers to its own file
// (after rank 0 removed an old record), and rank 0 learns every file's digest. Returns the layout record
// without "order" (rank 0 adds it) and without tensors. (collective)
ShardedLayout write_checkpoint_shards(Strategy& s, const std::string& stem,
                                      const std::vector<Strategy::ShardedOptimizerState>& states) {
  ShardedLayout layout;
  layout.world_size = s.world_size();
  layout.strategy = s.name();
  for (size_t i = 0; i < states.size(); ++i)
    for (FlatShard f : states[i].flats) {
      const std::string prefix = "optimizer." + std::to_string(i) + ".";
      f.key = prefix + f.key;
      for (auto& sl : f.slots) sl.key = prefix + sl.key;
      layout.buffers.push_back(std::move(f));
    }
  if (s.is_global_zero()) {
    fs::path p(stem);
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    fs::remove(stem + ".json");  // incomplete from here until the new record is written
  }
  s.barrier("save_checkpoint (sharded): old record removed");
  nn::FileDigest mine;
  std::exception_ptr failed;  // a rank that cannot write (disk full) stops every rank, not only itself
  try {
    mine = write_rank_shards(stem, s.global_rank(), s.world_size(), layout.buffers);
  } catch (const Error&) {
    failed = std::current_exception();
  }
  if (s.reduce_decision(failed != nullptr, /*all=*/false)) {
    if (failed) std::rethrow_exception(failed);
    VOLT_FAIL("Trainer::save_checkpoint: ", stem, ": another rank could not write its shard file (see its error)");
  }
  for (int r = 0; r < s.world_size(); ++r) {
    // Rank r has written its file once its digest arrives.
    const std::string d = s.broadcast_string(r == s.global_rank() ? nn::digest_to_json(mine).dump() : "", r);
    layout.files.push_back(nn::digest_from_json(nlohmann::json::parse(d), "rank " + std::to_string(r) + "'s shards"));
  }
  for (auto& b : layout.buffers) b.shard = Tensor();
  return layout;
}

// This rank's slices of a sharded checkpoint, per optimizer (keys relative to it); `same` turns false when the
// record holds buffers that are not optimizer state or that this rank's layout does not match. The slices are
// zero placeholders (trainer/checkpoint/sharded_stream.h): the file is checked here and read by
// fill_optimizer_shards once the optimizers hold their state.
void add_own_shards(Strategy& s, const std::string& stem, const ShardedLayout& layout,
                    const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers,
                    std::vector<std::vector<FlatShard>>& per, bool& same) {
  check_shard_files(stem, layout, s.global_rank());
  open_rank_shards(stem, layout, s.global_rank());  // checked; read by fill_optimizer_shards
  for (const auto& b : layout.buffers) {
    std::string rest;
    if (b.key.rfind("optimizer.", 0) != 0) {
      same = false;
      return;
    }
    const size_t i = parse_optimizer_key(b.key, stem + ".json", &rest);
    const std::string prefix = "optimizer." + std::to_string(i) + ".";
    if (i >= per.size()) {
      same = false;
      return;
    }
    FlatShard f = b;
    f.key = rest;
    for (auto& sl : f.slots) {
      if (sl.key.rfind(prefix, 0) != 0) same = false;
      else sl.key = sl.key.substr(prefix.size());
    }
    f.shard = zero_placeholder({b.chunk}, b.dtype, kCPU);
    per[i].push_back(std::move(f));
  }
  for (size_t i = 0; same && i < optimizers.size(); ++i) same = s.matches_sharded_layout(*optimizers[i], per[i]);
}

// resume_from of a sharded checkpoint. At the same world size, under a strategy whose shards are laid out as
// recorded, each rank reads only its own file: `direct[i]` receives optimizer i's flats (keys relative to it,
// zero placeholders filled later by fill_optimizer_shards) and the returned tensors are `<stem>.safetensors`'s,
// the module's as zero placeholders too (`module_streamed`: load_module_streamed fills them). Otherwise every
// rank puts the full layout back together in memory and `direct` stays empty. (collective)
nn::StateDict read_sharded_checkpoint(Strategy& s, const std::string& stem, const nlohmann::json& record,
                                      const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers, bool fitting,
                                      std::vector<std::vector<FlatShard>>& direct, bool& module_streamed) {
  const std::string js = stem + ".json";
  const ShardedLayout layout = parse_sharded_record(record, js);
  bool same = fitting && layout.world_size == s.world_size() && s.shards_optimizer_state();
  std::vector<std::vector<FlatShard>> per(optimizers.size());
  // Only this rank reads its file: a problem with it must stop every rank, not leave the others waiting below.
  std::exception_ptr failed;
  try {
    if (same) add_own_shards(s, stem, layout, optimizers, per, same);
  } catch (const Error&) {
    failed = std::current_exception();
  }
  if (s.reduce_decision(failed != nullptr, /*all=*/false)) {
    if (failed) std::rethrow_exception(failed);
    VOLT_FAIL("Trainer: checkpoint ", js, ": another rank could not read its shard file (see its error)");
  }
  if (s.reduce_decision(same, /*all=*/true)) {
    direct = std::move(per);
    module_streamed = true;
    nn::SafetensorsReader main(stem + ".safetensors");
    nn::StateDict out;
    for (const auto& e : main.entries())
      out.emplace_back(e.name, e.name.rfind("optimizer.", 0) != 0 ? zero_placeholder(e.shape, e.dtype, kCPU)
                                                                  : main.read(e));
    return out;
  }
  return consolidate_tensors(stem, layout);
}

// After load_module_state_dict took placeholders (which ran its checks: names, shapes, dtypes): reads each of
// the module's tensors from `<stem>.safetensors` straight into the module, one at a time.
void fill_module(nn::Module& module, const std::string& stem) {
  nn::SafetensorsReader main(stem + ".safetensors");
  std::map<std::string, const nn::SafetensorsReader::Entry*> by_name;
  for (const auto& e : main.entries()) by_name[e.name] = &e;
  for (auto& [name, t] : module.state_dict()) {
    auto it = by_name.find(name);
    VOLT_CHECK(it != by_name.end(), "Trainer: checkpoint ", stem, ".safetensors has no tensor '", name, "'");
    Tensor dst = t;
    main.read_into(*it->second, dst);
  }
}

// The module's state from placeholders (every check of load_module_state_dict), then filled in place from
// `<stem>.safetensors`. FSDP reads only the byte range of each parameter that this rank's shards hold, straight
// into them (FSDPStrategy::load_module_from_file): no unit is gathered, the host holds one slice at a time.
void load_module_streamed(Strategy& s, nn::Module& module, const nn::StateDict& placeholders,
                          const std::string& stem) {
  if (auto* fsdp = dynamic_cast<FSDPStrategy*>(&s)) {
    nn::SafetensorsReader main(stem + ".safetensors");
    fsdp->load_module_from_file(module, placeholders, main);
    return;
  }
  s.load_module_state_dict(module, placeholders);
  fill_module(module, stem);
}

// After load_sharded_optimizer_state took placeholders: reads this rank's shard file into the optimizers' own
// state buffers (Strategy::sharded_optimizer_state views them), one buffer at a time.
void fill_optimizer_shards(Strategy& s, const std::string& stem, const nlohmann::json& record,
                           const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) {
  const ShardedLayout layout = parse_sharded_record(record, stem + ".json");
  auto reader = open_rank_shards(stem, layout, s.global_rank());
  size_t filled = 0;
  for (size_t i = 0; i < optimizers.size(); ++i)
    for (auto& f : s.sharded_optimizer_state(*optimizers[i]).flats) {
      const std::string key = "optimizer." + std::to_string(i) + "." + f.key;
      const nn::SafetensorsReader::Entry* e = reader->find(key);
      VOLT_CHECK(e != nullptr, "Trainer: checkpoint ", stem, ": ", reader->path(), " has no tensor '", key,
                 "' for the state optimizer ", i, " keeps");
      reader->read_into(*e, f.shard);
      ++filled;
    }
  VOLT_CHECK(filled == layout.buffers.size(), "Trainer: checkpoint ", stem, ": the optimizers took ", filled,
             " of the ", layout.buffers.size(), " buffers in ", reader->path());
}

}  // namespace

static std::string checkpoint_stem(const std::string& path) {
  for (const char* ext : {".safetensors", ".json"}) {
    std::string e(ext);
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0)
      return path.substr(0, path.size() - e.size());
  }
  return path;
}

void Trainer::save_checkpoint(const std::string& path) {
  trace::Range range(trace::Layer::trainer, "[Trainer]save_checkpoint");
  VOLT_CHECK(module_ != nullptr, "Trainer::save_checkpoint: no module is attached (call it during fit)");
  std::string stem = checkpoint_stem(path);
  // Every rank: the optimizer state in its full layout (a sharded strategy gathers it here), or with
  // checkpoint_layout = sharded this rank's shards, written by every rank to its own file.
  const bool sharded = opt_.checkpoint_layout == CheckpointLayout::sharded && strategy_->shards_optimizer_state();
  // AsyncCheckpointing (trainer/callbacks/async_checkpointing.h): the write goes to its background thread, except
  // for the checkpoint of an interrupt (complete before fit returns, or before a preemption's requeue) and the
  // sharded layout. Either way the write in flight finishes first, and its failure is raised here.
  AsyncCheckpointing* async = nullptr;
  for (auto& c : callbacks_)
    if (auto* a = dynamic_cast<AsyncCheckpointing*>(c.get())) {
      a->settle(*strategy_);
      if (!sharded && interrupt_signal_ == 0) async = a;
    }
  std::vector<Strategy::OptimizerState> opt_states;
  std::vector<Strategy::ShardedOptimizerState> shard_states;
  for (auto& o : optimizers_) {
    if (!sharded) {
      opt_states.push_back(strategy_->optimizer_state(*o));
      continue;
    }
    shard_states.push_back(strategy_->sharded_optimizer_state(*o));
    opt_states.push_back(shard_states.back().replicated);
  }
  ShardedLayout layout;
  if (sharded) layout = write_checkpoint_shards(*strategy_, stem, shard_states);
  // Every rank too: the module state in its full layout (FSDP gathers the shards; rank 0 gets the values).
  nn::StateDict module_sd = strategy_->module_state_dict(*module_);
  if (strategy_->is_global_zero()) {
    nn::StateDict sd = std::move(module_sd);
    nlohmann::json opts = nlohmann::json::array();
    for (size_t i = 0; i < optimizers_.size(); ++i) {
      for (auto& [k, t] : opt_states[i].tensors) sd.emplace_back("optimizer." + std::to_string(i) + "." + k, t);
      opts.push_back({{"type", optimizers_[i]->type_name()}, {"hyper", opt_states[i].hyper}});
    }
    nlohmann::json scheds = nlohmann::json::array();
    for (auto& s : schedulers_)
      scheds.push_back({{"type", s.scheduler->type_name()}, {"interval", std::string(name(s.interval))}, {"frequency", s.frequency},
                        {"state", s.scheduler->state_dict()}});
    nlohmann::json cbs = nlohmann::json::object();
    for (auto& c : callbacks_) cbs[c->state_key()] = c->state_dict();
    // Inside a gradient-accumulation window (a mid-window validation saved by ModelCheckpoint) the accumulated
    // gradients are not saved: the checkpoint resumes at the window's first batch instead, with the random
    // state of that moment, so the resumed run replays the window and takes the same step (the weights,
    // optimizer state and global_step do not change inside a window).
    int64_t resume_batch = batches_done_;
    std::pair<uint64_t, uint64_t> rng{default_generator().seed(), default_generator().offset()};
    if (opt_.accumulate_grad_batches > 1 && fit_train_ && !stepped_last_batch_ && batches_done_ > window_start_batch_ &&
        batches_done_ < num_train_batches_) {
      resume_batch = window_start_batch_;
      rng = window_rng_;
    }
    nlohmann::json j = {
        {"format", "volt-checkpoint"},
        {"version", 1},
        {"epoch", epoch_},
        {"global_step", global_step_},
        {"batches_done", resume_batch},
        {"epoch_batches", num_train_batches_},
        {"optimizers", opts},
        {"schedulers", scheds},
        {"callbacks", cbs},
        {"rng", {{"seed", rng.first}, {"offset", rng.second}}},
        {"loader", {{"epoch", epoch_}, {"batches_consumed", resume_batch}}},
        {"hparams", module_->hparams()},
        {"precision", precision_name(precision_)},
    };
    if (scaler_) {
      const GradScalerRecord g = scaler_->state_dict();
      j["grad_scaler"] = {{"scale", g.scale}, {"growth_tracker", g.growth_tracker}, {"skipped", g.skipped}};
    }
    fs::path p(stem);
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    // The record goes first when overwriting (last, interrupted): a kill between the two renames then leaves
    // an incomplete checkpoint (no JSON), never a torn pair of new weights and an old record.
    fs::remove(stem + ".json");
    if (sharded) {
      for (auto& [k, t] : module_->state_dict()) layout.order.push_back(k);
      for (size_t i = 0; i < optimizers_.size(); ++i)
        for (auto& k : shard_states[i].order) layout.order.push_back("optimizer." + std::to_string(i) + "." + k);
      remove_stale_shard_files(stem, layout.world_size);
      j["sharded"] = sharded_record_to_json(layout);
    } else {
      remove_shards_dir(stem);  // a sharded checkpoint this one replaces
    }
    if (async) {
      // The state as it is now, in host memory of its own: training may change (or free) the originals.
      async->submit(stem, async->snapshot(sd), [stem, j = std::move(j)](const nn::StateDict& snapshot) mutable {
        nn::FileDigest weights = nn::save_safetensors(stem + ".safetensors", snapshot, {{"format", "volt-checkpoint"}});
        j["safetensors_digest"] = nn::digest_to_json(weights);
        nn::save_json_atomic(stem + ".json", j);
      });
    } else {
      nn::FileDigest weights = nn::save_safetensors(stem + ".safetensors", sd, {{"format", "volt-checkpoint"}});
      j["safetensors_digest"] = nn::digest_to_json(weights);
      nn::save_json_atomic(stem + ".json", j);
    }
  }
  if (async) async->note_queued();
  strategy_->barrier("save_checkpoint");
}

void Trainer::resume_from(const std::string& path, bool fitting) {
  std::string stem = checkpoint_stem(path);
  bool has_st = fs::exists(stem + ".safetensors"), has_js = fs::exists(stem + ".json");
  VOLT_CHECK(has_st && has_js, "Trainer: checkpoint \"", path, "\" is not a complete Volt checkpoint: ",
             has_st ? "" : stem + ".safetensors is missing", !has_st && !has_js ? " and " : "",
             has_js ? "" : stem + ".json is missing",
             " (a checkpoint needs both files)");
  const std::string js = stem + ".json", st = stem + ".safetensors";
  const nlohmann::json record = nn::load_json(js);
  const TrainerStateRecord rec = parse_trainer_state(record, js);
  verify_checkpoint_weights(stem, record);
  std::vector<std::vector<FlatShard>> direct;  // a sharded checkpoint loaded as it is: per optimizer, its flats
  bool module_streamed = false;               // the module's tensors in `all` are placeholders (fill_module)
  nn::StateDict all = is_sharded_record(record)
                          ? read_sharded_checkpoint(*strategy_, stem, record, optimizers_, fitting, direct,
                                                    module_streamed)
                          : nn::load_safetensors(st);
  nn::StateDict model;
  std::vector<nn::StateDict> opt_sd(optimizers_.size());
  for (auto& [k, t] : all) {
    if (k.rfind("optimizer.", 0) == 0) {
      std::string rest;
      size_t idx = parse_optimizer_key(k, st, &rest);
      if (fitting) {
        VOLT_CHECK(idx < opt_sd.size(), "Trainer: checkpoint ", st, " has state for optimizer ", idx, " (tensor '", k,
                   "') but configure_optimizers returned ", optimizers_.size());
        opt_sd[idx].emplace_back(rest, t);
      }
    } else {
      model.emplace_back(k, t);
    }
  }
  if (module_streamed) load_module_streamed(*strategy_, *module_, model, stem);
  else strategy_->load_module_state_dict(*module_, model);  // strict; collective under FSDP
  model.clear();
  all.clear();
  if (!fitting) return;

  VOLT_CHECK(rec.optimizers.size() == optimizers_.size(), "Trainer: checkpoint ", js, " holds ", rec.optimizers.size(),
             " optimizers but configure_optimizers returned ", optimizers_.size());
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    VOLT_CHECK(rec.optimizers[i].type == optimizers_[i]->type_name(), "Trainer: checkpoint ", js, ": optimizer ", i,
               " is ", rec.optimizers[i].type, " but the module configures ", optimizers_[i]->type_name());
    if (direct.empty()) strategy_->load_optimizer_state(*optimizers_[i], opt_sd[i]);
    else strategy_->load_sharded_optimizer_state(*optimizers_[i], opt_sd[i], direct[i]);
  }
  if (!direct.empty()) {
    direct.clear();
    fill_optimizer_shards(*strategy_, stem, record, optimizers_);
  }
  VOLT_CHECK(rec.schedulers.size() == schedulers_.size(), "Trainer: checkpoint ", js, " holds ",
             rec.schedulers.size(), " LR schedulers but configure_optimizers returned ", schedulers_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    VOLT_CHECK(rec.schedulers[i].type == schedulers_[i].scheduler->type_name(), "Trainer: checkpoint ", js,
               ": LR scheduler ", i, " is ", rec.schedulers[i].type, " but the module configures ",
               schedulers_[i].scheduler->type_name());
    schedulers_[i].scheduler->load_state_dict(rec.schedulers[i].state);
  }
  // Schedulers re-apply their own lr when loaded; with several on one optimizer the saved group values (what
  // the last scheduler step actually left there) must win, so the hyper-state is restored last.
  // The same range checks as the optimizers' constructors (Optimizer::load_hyper_state): a record with lr = -1
  // is refused, naming the optimizer and the key.
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    try {
      strategy_->load_optimizer_hyper_state(*optimizers_[i], rec.optimizers[i].hyper);
    } catch (const Error& e) {
      VOLT_FAIL("Trainer: checkpoint ", js, ": optimizers[", i, "].hyper: ", e.what());
    }
  }
  // 16-mixed resumes with the saved scale; a checkpoint of another precision (no scaler state) starts the
  // scaler afresh, as a new run would.
  if (scaler_ && rec.grad_scaler) scaler_->load_state_dict(*rec.grad_scaler);
  for (auto& c : callbacks_) {
    if (!rec.callbacks.contains(c->state_key())) continue;
    try {
      c->load_state_dict(rec.callbacks.at(c->state_key()));
    } catch (const nlohmann::json::exception& e) {
      VOLT_FAIL("Trainer: checkpoint ", js, ": the state of callback '", c->state_key(), "' is malformed: ", e.what());
    } catch (const Error& e) {
      VOLT_FAIL("Trainer: checkpoint ", js, ": callbacks[\"", c->state_key(), "\"]: ", e.what());
    }
  }

  // Where to continue: a finished epoch resumes at the start of the next one.
  const bool epoch_done = rec.batches_done >= rec.epoch_batches;
  const int64_t next_epoch = epoch_done ? rec.epoch + 1 : rec.epoch;
  // A checkpoint past the end of this run is a mistake (wrong file or wrong max_epochs / max_steps), not a
  // finished run: a run that reached its end resumes at exactly max_epochs (or max_steps) and does nothing.
  VOLT_CHECK(max_epochs_ < 0 || next_epoch <= max_epochs_, "Trainer: checkpoint ", js, " resumes at epoch ",
             next_epoch, " (epoch ", rec.epoch, ", ", rec.batches_done, "/", rec.epoch_batches,
             " batches done) but max_epochs=", max_epochs_, "; expected a checkpoint of this run (epoch <= max_epochs)");
  VOLT_CHECK(opt_.max_steps < 0 || rec.global_step <= opt_.max_steps, "Trainer: checkpoint ", js, " has global_step ",
             rec.global_step, " but max_steps=", opt_.max_steps, "; expected global_step <= max_steps");
  // Mid-epoch the loader position only means something with the same number of batches per epoch.
  VOLT_CHECK(epoch_done || rec.epoch_batches == num_train_batches_, "Trainer: checkpoint ", js,
             " was written after batch ", rec.batches_done, " of an epoch of ", rec.epoch_batches,
             " batches but the training loader now has ", num_train_batches_,
             " batches per epoch; resume mid-epoch with the same data, batch size and limit_train_batches");
  global_step_ = rec.global_step;
  epoch_ = next_epoch;
  resume_skip_ = epoch_done ? 0 : rec.batches_done;
  pending_rng_ = {{"seed", rec.rng_seed}, {"offset", rec.rng_offset}};
  // A killed run leaves orphan .safetensors and temp files next to the checkpoint it resumes from; a resumed run
  // may write into a new version folder and would never see them again. Only provable leftovers go
  // (cleanup_stale_checkpoint_files: Volt's temp names of dead writers, Volt tensor files without a record).
  if (strategy_->is_global_zero()) {
    const fs::path parent = fs::path(stem).parent_path();
    cleanup_stale_checkpoint_files(parent.empty() ? std::string(".") : parent.string());
  }
}

}  // namespace volt
