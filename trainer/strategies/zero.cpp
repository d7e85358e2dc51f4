#include <volt/trainer/strategies/zero.h>

#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <volt/kernels/ops.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/optim.h>

namespace volt {

namespace {

std::string state_key(size_t g, size_t i, const std::string& name) { return optimizer_slot_key("state", g, i, name); }

}  // namespace

std::string optimizer_slot_key(const char* kind, size_t g, size_t i, const std::string& name) {
  return std::string(kind) + "." + std::to_string(g) + "." + std::to_string(i) + "." + name;
}

std::optional<ZeroStage> parse_zero_strategy(const std::string& name) {
  if (name == "zero1" || name == "deepspeed_stage_1") return ZeroStage::one;
  if (name == "zero2" || name == "deepspeed_stage_2" || name == "ddp_sharded") return ZeroStage::two;
  return std::nullopt;
}

ZeroStrategy::ZeroStrategy(const DeviceSelection& devices, ZeroStage stage) : DDPStrategy(devices), stage_(stage) {}

ZeroStrategy::~ZeroStrategy() { restore_optimizers(); }

void ZeroStrategy::setup(nn::Module& module) {
  module.to(root_device());
  std::vector<Tensor> state;
  for (auto& [name, p] : module.named_parameters()) state.push_back(p);
  for (auto& [name, b] : module.named_buffers()) state.push_back(b);
  {
    NoGradGuard ng;
    dist::broadcast_parameters(group(), state, 0);
  }
  module_ = &module;
}

void ZeroStrategy::setup_optimizers(std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) {
  VOLT_CHECK(module_ != nullptr, name(), ": setup_optimizers before setup()");
  restore_optimizers();
  reducer_.reset();
  // Where each optimized tensor lives: (optimizer, group, index in the group).
  std::unordered_map<const TensorImpl*, std::tuple<int, int, int>> where;
  std::map<std::tuple<int, int, int>, int> owner_of;  // (optimizer, group, unit) -> owner key of the reducer
  owners_.clear();
  for (size_t k = 0; k < optimizers.size(); ++k) {
    auto& groups = optimizers[k]->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i = 0; i < groups[g].params.size(); ++i)
        where[groups[g].params[i].impl()] = {static_cast<int>(k), static_cast<int>(g), static_cast<int>(i)};
  }
  std::vector<dist::ShardedReducer::Param> params;
  std::set<const TensorImpl*> in_module;
  for (auto& [pname, p] : module_->named_parameters()) {
    in_module.insert(p.impl());
    if (!p.requires_grad()) continue;
    auto it = where.find(p.impl());
    VOLT_CHECK(it != where.end(), name(), ": parameter '", pname, "' requires grad but no optimizer holds it; a sharded "
               "strategy keeps gradients only for what an optimizer steps: add it to an optimizer or set "
               "requires_grad(false)");
    auto [k, g, i] = it->second;
    const int unit = shard_unit(pname);
    auto [key, fresh] = owner_of.try_emplace({k, g, unit}, static_cast<int>(owners_.size()));
    if (fresh) owners_.push_back({k, g, unit});
    params.push_back({pname, p, key->second});
  }
  for (size_t k = 0; k < optimizers.size(); ++k) {
    const auto& groups = optimizers[k]->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i = 0; i < groups[g].params.size(); ++i)
        VOLT_CHECK(in_module.count(groups[g].params[i].impl()) || !groups[g].params[i].requires_grad(), name(),
                   ": optimizer ", k, " holds a tensor (group ", g, ", index ", i, ") that is not a parameter of the "
                   "module; a sharded strategy can only shard the module's parameters");
  }
  reducer_ = std::make_unique<dist::ShardedReducer>(group(), std::move(params),
                                                     stage_ == ZeroStage::one ? dist::ShardedReducer::Stage::one
                                                                              : dist::ShardedReducer::Stage::two);
  const auto& buckets = reducer_->buckets();
  const auto& slots = reducer_->slots();
  slot_index_.assign(buckets.size(), {});
  managed_.clear();
  for (auto& o : optimizers) {
    Managed m;
    m.optimizer = o;
    for (auto& grp : o->param_groups()) m.original.push_back(grp.params);
    m.buckets.assign(o->param_groups().size(), {});
    managed_.push_back(std::move(m));
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int k = owners_[static_cast<size_t>(buckets[b].owner)].optimizer;
    const int g = owners_[static_cast<size_t>(buckets[b].owner)].group;
    managed_[static_cast<size_t>(k)].buckets[static_cast<size_t>(g)].push_back(static_cast<int>(b));
    for (int s : buckets[b].slots) slot_index_[b].push_back(std::get<2>(where.at(slots[static_cast<size_t>(s)].param.impl())));
  }
  // The optimizers now see this rank's shards only: state is allocated, and updates run, for 1/world of the
  // parameters. State from before (there is none unless the module stepped by itself) would not fit the shards.
  for (auto& m : managed_) {
    m.optimizer->load_state_dict({});
    auto& groups = m.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].params.clear();
      for (int b : m.buckets[g]) groups[g].params.push_back(buckets[static_cast<size_t>(b)].shard);
    }
  }
}

void ZeroStrategy::restore_optimizers() {
  for (auto& m : managed_) {
    auto& groups = m.optimizer->param_groups();
    for (size_t g = 0; g < groups.size() && g < m.original.size(); ++g) groups[g].params = m.original[g];
    m.optimizer->load_state_dict({});
  }
  managed_.clear();
}

int ZeroStrategy::unit_of_bucket(int b) const {
  return owners_.at(static_cast<size_t>(reducer_->buckets().at(static_cast<size_t>(b)).owner)).unit;
}

int ZeroStrategy::optimizer_of_bucket(int b) const {
  return owners_.at(static_cast<size_t>(reducer_->buckets().at(static_cast<size_t>(b)).owner)).optimizer;
}

std::vector<int> ZeroStrategy::buckets_of(const optim::Optimizer& o) {
  std::vector<int> out;
  if (Managed* m = managed(o))
    for (auto& group_buckets : m->buckets) out.insert(out.end(), group_buckets.begin(), group_buckets.end());
  return out;
}

ZeroStrategy::Managed* ZeroStrategy::managed(const optim::Optimizer& o) {
  for (auto& m : managed_)
    if (m.optimizer.get() == &o) return &m;
  return nullptr;
}

void ZeroStrategy::backward(const Tensor& loss, bool sync_grad) {
  VOLT_CHECK(reducer_ != nullptr, name(), ": backward before setup_optimizers()");
  reducer_->set_sync(sync_grad);
  loss.backward();
}

void ZeroStrategy::finish_gradient_sync() {
  if (!reducer_ || !reducer_->sync()) return;
  reducer_->finalize();
  // The parameters may have changed since the last gather (a resumed checkpoint, a callback): the optimizer
  // steps from their current values.
  reducer_->refresh_shards();
}

void ZeroStrategy::after_optimizer_step(optim::Optimizer& optimizer) {
  Managed* m = managed(optimizer);
  if (!m) return;
  for (auto& group_buckets : m->buckets)
    for (int b : group_buckets) reducer_->gather_parameters(b);
}

Tensor ZeroStrategy::clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  dist::ProcessGroup* g = &group();
  return nn::clip_grad_norm_no_sync_(params, max_norm, 2.0, [g](Tensor& partial, bool is_max) {
    g->all_reduce(partial, is_max ? dist::ReduceOp::Max : dist::ReduceOp::Sum);
  });
}

void ZeroStrategy::discard_gradients() {
  if (reducer_) reducer_->discard_gradients();
}

Strategy::OptimizerState ZeroStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  Managed* m = managed(optimizer);
  if (!m) return Strategy::optimizer_state(optimizer);
  std::map<std::string, Tensor> mine;
  for (auto& [k, t] : optimizer.state_dict()) mine[k] = t;
  const std::map<std::string, double> hyper = optimizer.hyper_state();
  OptimizerState out;
  for (auto& [k, v] : hyper)
    if (k.rfind("group.", 0) == 0) out.hyper[k] = v;
  const auto& buckets = reducer_->buckets();
  const auto& slots = reducer_->slots();
  for (size_t g = 0; g < m->buckets.size(); ++g) {
    const std::vector<std::string> names = optimizer.state_names(optimizer.param_groups()[g]);
    for (size_t j = 0; j < m->buckets[g].size(); ++j) {
      const int b = m->buckets[g][j];
      const auto& bucket = buckets[static_cast<size_t>(b)];
      const auto& index = slot_index_[static_cast<size_t>(b)];
      // A shard's step count is the step count of every parameter in it.
      auto step = mine.find(state_key(g, j, "step"));
      auto hstep = hyper.find(state_key(g, j, "step"));
      for (size_t s = 0; s < bucket.slots.size(); ++s) {
        if (step != mine.end()) out.tensors.emplace_back(state_key(g, index[s], "step"), step->second.clone());
        if (hstep != hyper.end()) out.hyper[state_key(g, index[s], "step")] = hstep->second;
      }
      for (const auto& n : names) {
        auto it = mine.find(state_key(g, j, n));
        if (it == mine.end()) continue;  // the same on every rank: state appears at the same step everywhere
        Tensor full = reducer_->gather_flat(b, it->second);
        for (size_t s = 0; s < bucket.slots.size(); ++s) {
          const auto& slot = slots[static_cast<size_t>(bucket.slots[s])];
          out.tensors.emplace_back(state_key(g, index[s], n),
                                   full.narrow(0, slot.offset, slot.param.numel()).view(slot.param.shape()));
        }
      }
    }
  }
  return out;
}

void ZeroStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& sd) {
  Managed* m = managed(optimizer);
  if (!m) return Strategy::load_optimizer_state(optimizer, sd);
  std::map<std::string, const Tensor*> full;
  for (auto& [k, t] : sd) full[k] = &t;
  std::set<std::string> used;
  nn::StateDict shards;
  const auto& buckets = reducer_->buckets();
  const auto& slots = reducer_->slots();
  const std::string who = optimizer.type_name() + ".load_state_dict (" + name() + ")";
  for (size_t g = 0; g < m->buckets.size(); ++g) {
    const std::vector<std::string> names = optimizer.state_names(optimizer.param_groups()[g]);
    for (size_t j = 0; j < m->buckets[g].size(); ++j) {
      const int b = m->buckets[g][j];
      const auto& bucket = buckets[static_cast<size_t>(b)];
      const auto& index = slot_index_[static_cast<size_t>(b)];
      const Tensor* step = nullptr;
      for (size_t s = 0; s < bucket.slots.size(); ++s) {
        auto it = full.find(state_key(g, index[s], "step"));
        if (it == full.end()) continue;
        used.insert(it->first);
        if (!step) step = it->second;
      }
      if (step) shards.emplace_back(state_key(g, j, "step"), *step);
      for (const auto& n : names) {
        std::vector<const Tensor*> parts(bucket.slots.size(), nullptr);
        std::string missing;
        size_t found = 0;
        for (size_t s = 0; s < bucket.slots.size(); ++s) {
          auto it = full.find(state_key(g, index[s], n));
          if (it == full.end()) {
            missing = state_key(g, index[s], n);
            continue;
          }
          used.insert(it->first);
          parts[s] = it->second;
          ++found;
        }
        if (found == 0) continue;
        VOLT_CHECK(found == parts.size(), who, ": the checkpoint has '", n, "' state for some parameters of group ", g,
                   " but not '", missing, "'; a sharded optimizer needs the state of all of them or of none");
        const Tensor& first = *parts[0];
        Tensor flat = empty({bucket.numel}, first.dtype(), slots[static_cast<size_t>(bucket.slots[0])].param.device());
        NoGradGuard ng;
        for (size_t s = 0; s < parts.size(); ++s) {
          const auto& slot = slots[static_cast<size_t>(bucket.slots[s])];
          const std::string key = state_key(g, index[s], n);
          VOLT_CHECK(parts[s]->shape() == slot.param.shape(), who, ": '", key, "' has shape ", parts[s]->shape_str(),
                     " but the parameter has shape ", slot.param.shape_str());
          VOLT_CHECK(parts[s]->dtype() == first.dtype(), who, ": '", key, "' is stored as ", dtype_name(parts[s]->dtype()),
                     " but the other state of its shard as ", dtype_name(first.dtype()));
          flat.narrow(0, slot.offset, slot.param.numel()).view(slot.param.shape()).copy_(*parts[s]);
        }
        shards.emplace_back(state_key(g, j, n), reducer_->slice_flat(b, flat));
      }
    }
  }
  for (auto& [k, t] : sd)
    VOLT_CHECK(used.count(k), who, ": unexpected key '", k, "'; expected state.<group>.<index>.<name> for a "
               "parameter of this optimizer that requires grad and a state this optimizer keeps");
  optimizer.load_state_dict(shards);
}

void ZeroStrategy::load_optimizer_hyper_state(optim::Optimizer& optimizer, const std::map<std::string, double>& hs) {
  Managed* m = managed(optimizer);
  if (!m) return Strategy::load_optimizer_hyper_state(optimizer, hs);
  std::map<std::string, double> shards;
  std::set<std::string> used;
  for (auto& [k, v] : hs)
    if (k.rfind("state.", 0) != 0) {
      shards[k] = v;  // group hyper-parameters: the optimizer checks them
      used.insert(k);
    }
  for (size_t g = 0; g < m->buckets.size(); ++g)
    for (size_t j = 0; j < m->buckets[g].size(); ++j) {
      const int b = m->buckets[g][j];
      const auto& index = slot_index_[static_cast<size_t>(b)];
      for (int i : index) {
        auto it = hs.find(state_key(g, i, "step"));
        if (it == hs.end()) continue;
        used.insert(it->first);
        shards.emplace(state_key(g, j, "step"), it->second);
      }
    }
  for (auto& [k, v] : hs)
    VOLT_CHECK(used.count(k), optimizer.type_name(), ".load_hyper_state (", name(), "): key '", k,
               "' names no step count of a parameter of this optimizer that requires grad");
  optimizer.load_hyper_state(shards);
}

void ZeroStrategy::teardown(nn::Module& module) {
  restore_optimizers();
  reducer_.reset();
  slot_index_.clear();
  owners_.clear();
  module_ = nullptr;
  DDPStrategy::teardown(module);
}

std::unique_ptr<Strategy> make_zero_strategy(const DeviceSelection& devices, ZeroStage stage) {
  return std::make_unique<ZeroStrategy>(devices, stage);
}

}  // namespace volt
