// ZeroStrategy's sharded checkpoints (each rank writes and reads its own shards) and the parameters behind an
// optimizer's shards (toggle_optimizer). Keys follow ZeroStrategy::optimizer_state: the full layout names each
// parameter's state "state.<group>.<index>.<name>"; a flat buffer is bucket j of a group, "flat.<group>.<j>.<name>".
#include <map>
#include <set>

#include <volt/nn/optim.h>
#include <volt/trainer/strategies/zero.h>

namespace volt {

namespace {

// "flat.<g>.<j>.<name>" -> (g, j, name); false otherwise.
bool parse_flat_key(const std::string& k, size_t& g, size_t& j, std::string& name) {
  static const std::string kPre = "flat.";
  if (k.rfind(kPre, 0) != 0) return false;
  size_t pos = kPre.size();
  auto number = [&](size_t& out) {
    const size_t dot = k.find('.', pos);
    if (dot == std::string::npos || dot == pos || dot - pos > 6) return false;
    for (size_t c = pos; c < dot; ++c)
      if (k[c] < '0' || k[c] > '9') return false;
    out = std::stoul(k.substr(pos, dot - pos));
    pos = dot + 1;
    return true;
  };
  if (!number(g) || !number(j) || pos >= k.size()) return false;
  name = k.substr(pos);
  return true;
}

}  // namespace

FlatShard ZeroStrategy::flat_layout(const Managed& m, size_t g, size_t j, const std::string& state_name) const {
  const int b = m.buckets[g][j];
  const auto& bucket = reducer_->buckets()[static_cast<size_t>(b)];
  const auto& index = slot_index_[static_cast<size_t>(b)];
  FlatShard f;
  f.key = optimizer_slot_key("flat", g, j, state_name);
  f.numel = bucket.numel;
  f.chunk = bucket.chunk;
  f.dtype = bucket.shard.dtype();
  for (size_t s = 0; s < bucket.slots.size(); ++s) {
    const auto& slot = reducer_->slots()[static_cast<size_t>(bucket.slots[s])];
    f.slots.push_back({optimizer_slot_key("state", g, static_cast<size_t>(index[s]), state_name), slot.offset, slot.param.shape()});
  }
  return f;
}

Strategy::ShardedOptimizerState ZeroStrategy::sharded_optimizer_state(const optim::Optimizer& optimizer) {
  ShardedOptimizerState out;
  Managed* m = managed(optimizer);
  if (!m) {  // not set up: nothing sharded
    out.replicated = Strategy::optimizer_state(optimizer);
    for (auto& [k, t] : out.replicated.tensors) out.order.push_back(k);
    return out;
  }
  std::map<std::string, Tensor> mine;
  for (auto& [k, t] : optimizer.state_dict()) mine[k] = t;
  const std::map<std::string, double> hyper = optimizer.hyper_state();
  for (auto& [k, v] : hyper)
    if (k.rfind("group.", 0) == 0) out.replicated.hyper[k] = v;
  const auto& buckets = reducer_->buckets();
  // The same tensors, in the same order, as optimizer_state(): per bucket, the step counts, then each state.
  for (size_t g = 0; g < m->buckets.size(); ++g) {
    const std::vector<std::string> names = optimizer.state_names(optimizer.param_groups()[g]);
    for (size_t j = 0; j < m->buckets[g].size(); ++j) {
      const int b = m->buckets[g][j];
      const auto& index = slot_index_[static_cast<size_t>(b)];
      auto step = mine.find(optimizer_slot_key("state", g, j, "step"));
      auto hstep = hyper.find(optimizer_slot_key("state", g, j, "step"));
      for (size_t s = 0; s < buckets[static_cast<size_t>(b)].slots.size(); ++s) {
        const std::string k = optimizer_slot_key("state", g, static_cast<size_t>(index[s]), "step");
        if (step != mine.end()) {
          out.replicated.tensors.emplace_back(k, step->second.clone());
          out.order.push_back(k);
        }
        if (hstep != hyper.end()) out.replicated.hyper[k] = hstep->second;
      }
      for (const auto& n : names) {
        auto it = mine.find(optimizer_slot_key("state", g, j, n));
        if (it == mine.end()) continue;  // not created yet (the same on every rank)
        FlatShard f = flat_layout(*m, g, j, n);
        f.dtype = it->second.dtype();
        f.shard = it->second.detach().contiguous();
        for (const auto& sl : f.slots) out.order.push_back(sl.key);
        out.flats.push_back(std::move(f));
      }
    }
  }
  return out;
}

bool ZeroStrategy::matches_sharded_layout(const optim::Optimizer& optimizer, const std::vector<FlatShard>& flats) {
  Managed* m = managed(optimizer);
  if (!m || !reducer_) return false;
  for (const auto& f : flats) {
    size_t g = 0, j = 0;
    std::string n;
    if (!parse_flat_key(f.key, g, j, n) || g >= m->buckets.size() || j >= m->buckets[g].size()) return false;
    FlatShard expect = flat_layout(*m, g, j, n);
    expect.dtype = f.dtype;  // state may be kept in another dtype than the parameters; the optimizer checks it
    if (!expect.same_layout(f)) return false;
  }
  return true;
}

void ZeroStrategy::load_sharded_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& replicated,
                                                const std::vector<FlatShard>& flats) {
  Managed* m = managed(optimizer);
  VOLT_CHECK(m != nullptr && matches_sharded_layout(optimizer, flats), name(), ": load_sharded_optimizer_state(",
             optimizer.type_name(), "): the checkpoint's shards are not laid out like this rank's; consolidate it "
             "and use load_optimizer_state");
  std::map<std::string, const Tensor*> rep;
  for (auto& [k, t] : replicated) rep[k] = &t;
  std::map<std::string, const FlatShard*> by_key;
  for (const auto& f : flats) by_key[f.key] = &f;
  std::set<std::string> used;
  nn::StateDict shards;
  const auto& buckets = reducer_->buckets();
  for (size_t g = 0; g < m->buckets.size(); ++g) {
    const std::vector<std::string> names = optimizer.state_names(optimizer.param_groups()[g]);
    for (size_t j = 0; j < m->buckets[g].size(); ++j) {
      const int b = m->buckets[g][j];
      const auto& index = slot_index_[static_cast<size_t>(b)];
      const Tensor* step = nullptr;
      for (int i : index) {
        auto it = rep.find(optimizer_slot_key("state", g, static_cast<size_t>(i), "step"));
        if (it == rep.end()) continue;
        used.insert(it->first);
        if (!step) step = it->second;
      }
      if (step) shards.emplace_back(optimizer_slot_key("state", g, j, "step"), *step);
      for (const auto& n : names) {
        auto it = by_key.find(optimizer_slot_key("flat", g, j, n));
        if (it == by_key.end()) continue;
        used.insert(it->first);
        shards.emplace_back(optimizer_slot_key("state", g, j, n),
                            it->second->shard.to(buckets[static_cast<size_t>(b)].shard.device()));
      }
    }
  }
  for (auto& [k, t] : replicated)
    VOLT_CHECK(used.count(k), optimizer.type_name(), ".load_state_dict (", name(), "): unexpected key '", k,
               "' beside the shards; expected the step counts of this optimizer's parameters");
  for (const auto& f : flats)
    VOLT_CHECK(used.count(f.key), optimizer.type_name(), ".load_state_dict (", name(), "): the checkpoint's buffer '",
               f.key, "' is not a state this optimizer keeps");
  optimizer.load_state_dict(shards);
}

std::vector<Tensor> ZeroStrategy::optimizer_parameters(const optim::Optimizer& optimizer) {
  Managed* m = managed(optimizer);
  if (!m) return Strategy::optimizer_parameters(optimizer);
  std::vector<Tensor> out;
  for (const auto& group : m->original)
    for (const auto& p : group) out.push_back(p);
  return out;
}

}  // namespace volt
