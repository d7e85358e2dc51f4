#include <volt/nn/optim.h>

#include <volt/kernels/graph.h>
#include <volt/runtime/generator.h>
#include <volt/runtime/trace.h>

#include <cmath>
#include <unordered_set>


namespace volt::optim {

namespace {

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// "state.<g>.<i>.<name>" -> (g, i, name); false when the key does not have that form.
bool parse_state_key(const std::string& key, size_t& g, size_t& i, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  size_t a = key.find('.', 6);
  if (a == std::string::npos) return false;
  size_t b = key.find('.', a + 1);
  if (b == std::string::npos) return false;
  try {
    size_t used = 0;
    g = std::stoul(key.substr(6, a - 6), &used);
    if (used != a - 6) return false;
    i = std::stoul(key.substr(a + 1, b - a - 1), &used);
    if (used != b - a - 1) return false;
  } catch (const std::exception&) {
    return false;
  }
  name = key.substr(b + 1);
  return !name.empty();
}

std::string prefix(size_t g, size_t i) { return "state." + std::to_string(g) + "." + std::to_string(i) + "."; }

// GroupOptions' fields in GroupOption order (the one place that ties names to members).
struct OptionField {
  const char* name;
  std::optional<double> GroupOptions::*number;
  std::optional<bool> GroupOptions::*flag;
};
constexpr OptionField kFields[] = {
    {"momentum", &GroupOptions::momentum, nullptr},     {"dampening", &GroupOptions::dampening, nullptr},
    {"weight_decay", &GroupOptions::weight_decay, nullptr}, {"nesterov", nullptr, &GroupOptions::nesterov},
    {"beta1", &GroupOptions::beta1, nullptr},           {"beta2", &GroupOptions::beta2, nullptr},
    {"eps", &GroupOptions::eps, nullptr},               {"amsgrad", nullptr, &GroupOptions::amsgrad},
    {"alpha", &GroupOptions::alpha, nullptr},           {"centered", nullptr, &GroupOptions::centered},
    {"lr_decay", &GroupOptions::lr_decay, nullptr},
    {"initial_accumulator_value", &GroupOptions::initial_accumulator_value, nullptr},
    {"initial_lr", &GroupOptions::initial_lr, nullptr}, {"max_lr", &GroupOptions::max_lr, nullptr},
    {"base_momentum", &GroupOptions::base_momentum, nullptr}, {"max_momentum", &GroupOptions::max_momentum, nullptr},
};
constexpr size_t kFieldCount = sizeof(kFields) / sizeof(kFields[0]);
static_assert(kFieldCount == static_cast<size_t>(GroupOption::max_momentum) + 1);

bool is_scheduler_field(size_t k) { return k >= static_cast<size_t>(GroupOption::initial_lr); }

}  // namespace

const char* group_option_name(GroupOption o) { return kFields[static_cast<size_t>(o)].name; }

std::optional<GroupOption> parse_group_option(const std::string& name) {
  for (size_t k = 0; k < kFieldCount; ++k)
    if (name == kFields[k].name) return static_cast<GroupOption>(k);
  return std::nullopt;
}

std::optional<double> get_group_option(const GroupOptions& g, GroupOption o) {
  const OptionField& f = kFields[static_cast<size_t>(o)];
  if (f.number) return g.*f.number;
  if (!(g.*f.flag).has_value()) return std::nullopt;
  return *(g.*f.flag) ? 1.0 : 0.0;
}

void set_group_option(GroupOptions& g, GroupOption o, double v) {
  const OptionField& f = kFields[static_cast<size_t>(o)];
  if (f.number) g.*f.number = v;
  else g.*f.flag = v != 0.0;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, GroupOptions defaults)
    : default_lr_(default_lr), defaults_(defaults) {
  VOLT_CHECK(!groups.empty(), "optimizer: got no parameter groups");
  for (auto& g : groups) add_param_group(std::move(g));
}

DType Optimizer::state_dtype(DType param) const { return is_half(param) && fp32_state_ ? DType::f32 : param; }

void Optimizer::add_param_group(ParamGroup group) {
  VOLT_CHECK(!group.params.empty(), "optimizer: parameter group ", groups_.size(),
             " has an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    VOLT_CHECK(p.defined(), "optimizer: parameter ", i, " of group ", groups_.size(), " is undefined");
    VOLT_CHECK(is_floating(p.dtype()), "optimizer: parameter ", i, " of group ", groups_.size(), " has dtype ",
               dtype_name(p.dtype()), "; only floating-point tensors can be optimized");
    VOLT_CHECK(seen.insert(p.impl()).second, "optimizer: parameter ", i, " of group ", groups_.size(),
               " appears more than once across the parameter groups");
  }
  if (std::isnan(group.lr)) group.lr = default_lr_;
  VOLT_CHECK(group.lr >= 0.0, "optimizer: lr must be >= 0, got ", group.lr, " for group ", groups_.size());
  GroupOptions& o = group.options;
  for (size_t k = 0; k < kFieldCount; ++k) {
    const auto opt = static_cast<GroupOption>(k);
    const std::optional<double> mine = get_group_option(o, opt), dflt = get_group_option(defaults_, opt);
    if (is_scheduler_field(k)) continue;
    VOLT_CHECK(!mine || dflt, "optimizer: parameter group ", groups_.size(), " sets option '", kFields[k].name,
               "', which this optimizer does not have");
    if (!mine && dflt) set_group_option(o, opt, *dflt);
  }
  const size_t gi = groups_.size();
  for (auto f : {&GroupOptions::momentum, &GroupOptions::dampening, &GroupOptions::weight_decay, &GroupOptions::eps,
                 &GroupOptions::lr_decay, &GroupOptions::initial_accumulator_value})
    if ((o.*f).has_value())
      VOLT_CHECK(*(o.*f) >= 0.0 && std::isfinite(*(o.*f)), "optimizer: parameter group ", gi,
                 " has a negative or non-finite option: ", *(o.*f));
  for (auto f : {&GroupOptions::beta1, &GroupOptions::beta2})
    if ((o.*f).has_value())
      VOLT_CHECK(*(o.*f) >= 0.0 && *(o.*f) < 1.0, "optimizer: betas must be in [0, 1), got ", *(o.*f),
                 " in parameter group ", gi);
  if (o.alpha.has_value())
    VOLT_CHECK(*o.alpha >= 0.0 && *o.alpha <= 1.0, "optimizer: alpha must be in [0, 1], got ", *o.alpha,
               " in parameter group ", gi);
  if (o.nesterov.value_or(false))
    VOLT_CHECK(o.momentum.value_or(0) > 0 && o.dampening.value_or(0) == 0, "optimizer: parameter group ", gi,
               " uses nesterov, which needs momentum > 0 and dampening 0, got momentum=", o.momentum.value_or(0),
               ", dampening=", o.dampening.value_or(0));
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) {
      if (!p.impl()->autograd || !p.impl()->autograd->grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard ng;
        p.impl()->autograd->grad.zero_();
      }
    }
}

Optimizer::ParamState& Optimizer::state(size_t g, size_t i) {
  if (state_.size() < groups_.size()) state_.resize(groups_.size());
  if (state_[g].size() < groups_[g].params.size()) state_[g].resize(groups_[g].params.size());
  return state_[g][i];
}

int64_t Optimizer::step_count(size_t g, size_t i) const {
  if (g >= state_.size() || i >= state_[g].size()) return 0;
  return state_[g][i].step;
}

Tensor Optimizer::usable_grad(const Tensor& p, size_t g, size_t i) const {
  if (!p.impl()->autograd) return Tensor();
  Tensor grad = p.impl()->autograd->grad;
  if (!grad.defined()) return grad;
  VOLT_CHECK(p.is_contiguous(), type_name(), ".step: parameter ", i, " of group ", g, " (shape ", p.shape_str(),
             ") is not contiguous; fused updates need contiguous parameters");
  VOLT_CHECK(grad.shape() == p.shape() && grad.dtype() == p.dtype() && grad.device() == p.device(), type_name(),
             ".step: gradient of parameter ", i, " of group ", g, " is ", grad.shape_str(), " ",
             dtype_name(grad.dtype()), " on ", grad.device().str(), " but the parameter is ", p.shape_str(), " ",
             dtype_name(p.dtype()), " on ", p.device().str());
  return grad.is_contiguous() ? grad : grad.contiguous();
}

void Optimizer::ensure_buffers(ParamState& st, const Tensor& p, size_t count) {
  if (st.buffers.size() < count) st.buffers.resize(count);
  const DType dt = state_dtype(p.dtype());
  for (size_t k = 0; k < count; ++k) {
    Tensor& b = st.buffers[k];
    // Parameters moved (Module::to) after the state was created: follow them.
    if (b.defined() && (b.device() != p.device() || b.dtype() != dt)) b = b.to(p.device()).to(dt).contiguous();
    if (!b.defined()) b = zeros(p.shape(), dt, p.device());
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t g = 0; g < state_.size() && g < groups_.size(); ++g) {
    std::vector<std::string> names = state_names(groups_[g]);
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const ParamState& st = state_[g][i];
      if (st.step == 0) continue;
      out.emplace_back(prefix(g, i) + "step", scalar_tensor(static_cast<double>(st.step), DType::i64));
      for (size_t k = 0; k < st.buffers.size() && k < names.size(); ++k)
        if (st.buffers[k].defined()) out.emplace_back(prefix(g, i) + names[k], st.buffers[k]);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  struct Item {
    size_t g, i, k;  // k: buffer index, or SIZE_MAX for the step count
    const Tensor* t;
  };
  std::vector<Item> items;
  for (const auto& [key, t] : sd) {
    size_t g = 0, i = 0;
    std::string name;
    VOLT_CHECK(parse_state_key(key, g, i, name), type_name(), ".load_state_dict: unexpected key '", key,
               "'; expected state.<group>.<index>.<name>");
    VOLT_CHECK(g < groups_.size() && i < groups_[g].params.size(), type_name(), ".load_state_dict: key '", key,
               "' names parameter ", i, " of group ", g, " but the optimizer has ", groups_.size(), " group(s)",
               g < groups_.size() ? " and " + std::to_string(groups_[g].params.size()) + " parameter(s) in that group"
                                  : std::string());
    VOLT_CHECK(t.defined(), type_name(), ".load_state_dict: tensor '", key, "' is undefined");
    if (name == "step") {
      VOLT_CHECK(t.numel() == 1 && t.dtype() == DType::i64, type_name(), ".load_state_dict: '", key,
                 "' must hold one i64 step count, got shape ", t.shape_str(), " of dtype ", dtype_name(t.dtype()));
      VOLT_CHECK(t.item<int64_t>() >= 0, type_name(), ".load_state_dict: '", key, "' = ", t.item<int64_t>(),
                 " is a negative step count; expected >= 0");
      items.push_back({g, i, SIZE_MAX, &t});
      continue;
    }
    std::vector<std::string> names = state_names(groups_[g]);
    size_t k = 0;
    while (k < names.size() && names[k] != name) ++k;
    VOLT_CHECK(k < names.size(), type_name(), ".load_state_dict: unexpected state '", name, "' in key '", key, "'");
    const Tensor& p = groups_[g].params[i];
    VOLT_CHECK(t.shape() == p.shape(), type_name(), ".load_state_dict: '", key, "' has shape ", t.shape_str(),
               " but the parameter has shape ", p.shape_str());
    VOLT_CHECK(t.dtype() == state_dtype(p.dtype()), type_name(), ".load_state_dict: '", key, "' is stored as ",
               dtype_name(t.dtype()), " but the optimizer keeps it as ", dtype_name(state_dtype(p.dtype())),
               " for a ", dtype_name(p.dtype()), " parameter");
    items.push_back({g, i, k, &t});
  }
  state_.clear();
  for (const auto& it : items) {
    ParamState& st = state(it.g, it.i);
    if (it.k == SIZE_MAX) {
      st.step = it.t->item<int64_t>();
      continue;
    }
    const Tensor& p = groups_[it.g].params[it.i];
    if (st.buffers.size() <= it.k) st.buffers.resize(it.k + 1);
    NoGradGuard ng;
    Tensor b = empty(p.shape(), state_dtype(p.dtype()), p.device());
    b.copy_(*it.t);
    st.buffers[it.k] = b;
  }
}

std::map<std::string, double> Optimizer::hyper_state() const {
  std::map<std::string, double> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "group." + std::to_string(g) + ".";
    out[pre + "lr"] = groups_[g].lr;
    for (size_t k = 0; k < kFieldCount; ++k)
      if (auto v = get_group_option(groups_[g].options, static_cast<GroupOption>(k))) out[pre + kFields[k].name] = *v;
  }
  for (size_t g = 0; g < state_.size(); ++g)
    for (size_t i = 0; i < state_[g].size(); ++i)
      if (state_[g][i].step > 0) out[prefix(g, i) + "step"] = static_cast<double>(state_[g][i].step);
  return out;
}

namespace {

// The value ranges add_param_group (and so every optimizer's constructor) accepts, for one hyper-state entry;
// "" when `v` is in range, else what was expected.
std::string hyper_range_problem(const std::string& name, double v) {
  if (!std::isfinite(v)) return "a finite number";
  if (name == "beta1" || name == "beta2") return v >= 0.0 && v < 1.0 ? "" : "a value in [0, 1)";
  if (name == "alpha") return v >= 0.0 && v <= 1.0 ? "" : "a value in [0, 1]";
  if (name == "nesterov" || name == "amsgrad" || name == "centered") return v == 0.0 || v == 1.0 ? "" : "0 or 1 (a flag)";
  // lr, momentum, dampening, weight_decay, eps, lr_decay, initial_accumulator_value, the schedulers' fields
  return v >= 0.0 ? "" : "a value >= 0";
}

}  // namespace

void Optimizer::load_hyper_state(const std::map<std::string, double>& hs) {
  // Staged: a record with one bad entry changes nothing.
  std::vector<ParamGroup> groups = groups_;
  std::vector<std::pair<std::pair<size_t, size_t>, int64_t>> steps;
  for (const auto& [key, v] : hs) {
    size_t g = 0, i = 0;
    std::string name;
    if (parse_state_key(key, g, i, name)) {
      VOLT_CHECK(name == "step" && g < groups_.size() && i < groups_[g].params.size(), type_name(),
                 ".load_hyper_state: key '", key, "' names no parameter's step count");
      VOLT_CHECK(v >= 0 && v <= 9007199254740992.0 && v == std::floor(v), type_name(), ".load_hyper_state: '", key,
                 "' = ", v, " is not a step count; expected an integer in [0, 2^53]");
      steps.push_back({{g, i}, static_cast<int64_t>(v)});
      continue;
    }
    VOLT_CHECK(key.rfind("group.", 0) == 0, type_name(), ".load_hyper_state: unexpected key '", key, "'");
    size_t dot = key.find('.', 6);
    VOLT_CHECK(dot != std::string::npos && dot > 6 && dot - 6 <= 6 && key.find_first_not_of("0123456789", 6) == dot,
               type_name(), ".load_hyper_state: malformed key '", key,
               "'; expected group.<g>.<name> with a group index of at most 6 digits");
    g = std::stoul(key.substr(6, dot - 6));
    VOLT_CHECK(g < groups_.size(), type_name(), ".load_hyper_state: key '", key, "' names group ", g,
               " but the optimizer has ", groups_.size());
    name = key.substr(dot + 1);
    const std::optional<GroupOption> opt = parse_group_option(name);
    VOLT_CHECK(name == "lr" || (opt && (is_scheduler_field(static_cast<size_t>(*opt)) ||
                                        get_group_option(defaults_, *opt))),
               type_name(), ".load_hyper_state: key '", key, "' names an option ", type_name(), " does not have");
    const std::string expected = hyper_range_problem(name, v);
    VOLT_CHECK(expected.empty(), type_name(), ".load_hyper_state: '", key, "' = ", v, " is out of range; expected ",
               expected, " (the range ", type_name(), "'s constructor accepts)");
    if (opt) set_group_option(groups[g].options, *opt, v);
    else groups[g].lr = v;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupOptions& o = groups[g].options;
    if (o.nesterov.value_or(false))
      VOLT_CHECK(o.momentum.value_or(0) > 0 && o.dampening.value_or(0) == 0, type_name(), ".load_hyper_state: 'group.",
                 g, ".nesterov' = 1 needs momentum > 0 and dampening 0, got momentum=", o.momentum.value_or(0),
                 ", dampening=", o.dampening.value_or(0), " (the combination ", type_name(),
                 "'s constructor accepts)");
  }
  groups_ = std::move(groups);
  for (const auto& [gi, step] : steps) state(gi.first, gi.second).step = step;
}

// ---- SGD ------------------------------------------------------------------------------------------------------

namespace {
GroupOptions sgd_defaults(const SGDOptions& o) {
  VOLT_CHECK(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0, "SGD: expected lr, momentum, weight_decay >= 0, got ",
             o.lr, ", ", o.momentum, ", ", o.weight_decay);
  VOLT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and dampening 0, got "
             "momentum=", o.momentum, ", dampening=", o.dampening);
  GroupOptions d;
  d.momentum = o.momentum;
  d.dampening = o.dampening;
  d.weight_decay = o.weight_decay;
  d.nesterov = o.nesterov;
  return d;
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(std::vector<ParamGroup>{{std::move(params), o.lr, {}}}, o) {}
SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : Optimizer(std::move(groups), o.lr, sgd_defaults(o)) {
  fp32_state_ = o.fp32_state;
}

std::vector<std::string> SGD::state_names(const ParamGroup& group) const {
  if (group.options.momentum.value_or(0.0) == 0.0) return {};
  return {"momentum_buffer"};
}

namespace {

// A parameter group's updates split into the batches one multi-tensor op can take: entries that share device,
// param dtype, state dtype and `key` (the step count, or SGD's first-step flag), in first-seen order.
template <class Entry, class Key>
struct MultiBatches {
  struct Batch {
    Device device;
    DType dtype, state_dtype;
    bool has_state;
    Key key;
    std::vector<Entry> entries;
    std::vector<size_t> index;  // the entries' parameter indices in the group
  };
  std::vector<Batch> list;
  void add(const Tensor& p, const Tensor& state, Key key, Entry e, size_t i) {
    const bool has = state.defined();
    const DType sd = has ? state.dtype() : p.dtype();
    for (Batch& b : list)
      if (b.device == p.device() && b.dtype == p.dtype() && b.has_state == has && b.state_dtype == sd && b.key == key) {
        b.entries.push_back(std::move(e));
        b.index.push_back(i);
        return;
      }
    list.push_back(Batch{p.device(), p.dtype(), sd, has, key, {std::move(e)}, {i}});
  }
  std::vector<std::vector<size_t>> members() const {
    std::vector<std::vector<size_t>> out;
    for (const Batch& b : list) out.push_back(b.index);
    return out;
  }
};

// The Graph capturing the updates of a group whose first parameter is `p`, or nullptr (an eager step). A capture
// needs the state made by an eager step first: creating it inside the capture would re-zero it at every replay.
Graph* capturing_graph(const Tensor& p) { return Graph::capturing(p.device()); }
void check_capturable(bool ready, const std::string& who, size_t g, size_t i) {
  VOLT_CHECK(ready, who, ".step under graph capture: parameter ", i, " of group ", g, " has no optimizer state yet; "
             "take one eager step before capturing (the state must exist before the capture)");
}

// What a captured update of group g was recorded against: the number of groups, the group's parameters (which
// tensors, whether they require grad) and the memory of their state. A replay whose optimizer differs in any of
// these (a group added, a parameter frozen, load_state_dict's new state tensors) is refused: the graph would
// update the old set, or write into freed state. state_of(i): parameter i's ParamState.
template <class StateOf>
std::vector<uintptr_t> capture_fingerprint(const std::vector<ParamGroup>& groups, size_t g, StateOf&& state_of) {
  std::vector<uintptr_t> f{groups.size(), groups[g].params.size()};
  for (size_t i = 0; i < groups[g].params.size(); ++i) {
    const Tensor& p = groups[g].params[i];
    f.push_back(reinterpret_cast<uintptr_t>(p.impl()));
    f.push_back(p.requires_grad() ? 1 : 0);
    for (const Tensor& b : state_of(i).buffers) f.push_back(b.defined() ? reinterpret_cast<uintptr_t>(b.data_ptr()) : 0);
  }
  return f;
}

// The dynamic block of group g's captured updates (one optimizer_dynamic_bytes() unit per multi-tensor batch,
// `members` listing each batch's parameter indices). Before every replay it counts the step of every member and
// calls write(unit, step) for each batch; the replay is refused when the group's fingerprint changed, when
// `one_step_per_batch` (the kernels read one step for the whole batch: Adam's bias corrections) and a batch's
// members no longer share one step count (an eager step in between updated only some of them), or when same_flags()
// says the kernels' specialisation no longer holds.
template <class StateOf, class Write, class SameFlags>
char* dynamic_update_block(Graph& graph, const std::vector<ParamGroup>& groups, size_t g,
                           std::vector<std::vector<size_t>> members, bool one_step_per_batch, StateOf state_of,
                           Write write, SameFlags same_flags) {
  const size_t unit = optimizer_dynamic_bytes();
  auto print = capture_fingerprint(groups, g, state_of);
  return static_cast<char*>(graph.dynamic(
      unit * members.size(),
      [members, unit, state_of, write](void* host) {
        for (size_t k = 0; k < members.size(); ++k) {
          int64_t step = 0;
          for (size_t i : members[k]) step = ++state_of(i).step;
          write(static_cast<char*>(host) + k * unit, step);
        }
      },
      [&groups, g, print, members, one_step_per_batch, state_of, same_flags] {
        if (g >= groups.size() || capture_fingerprint(groups, g, state_of) != print) return false;
        if (one_step_per_batch)
          for (const auto& batch : members)
            for (size_t i : batch)
              if (state_of(i).step != state_of(batch.front()).step) return false;
        return same_flags();
      }));
}

SgdHyper sgd_hyper(const ParamGroup& group) {
  SgdHyper h;
  h.lr = group.lr;
  h.momentum = group.options.momentum.value();
  h.dampening = group.options.dampening.value();
  h.weight_decay = group.options.weight_decay.value();
  h.nesterov = group.options.nesterov.value();
  return h;
}

}  // namespace

void SGD::step() {
  trace::Range range(trace::Layer::optim, "[Optimizer]SGD.step");
  NoGradGuard ng;
  static const Tensor kNone;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    SgdHyper h = sgd_hyper(group);
    Graph* graph = group.params.empty() ? nullptr : capturing_graph(group.params.front());
    // One multi-tensor update per (device, dtype, state dtype, first step) batch of the group: usually one.
    MultiBatches<SgdTensors, bool> batches;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = usable_grad(p, g, i);
      if (!grad.defined()) continue;
      ParamState& st = state(g, i);
      const bool first = h.momentum != 0.0 && (st.buffers.empty() || !st.buffers[0].defined());
      if (graph != nullptr) check_capturable(!first, type_name(), g, i);
      if (h.momentum != 0.0) ensure_buffers(st, p, 1);
      if (graph == nullptr) ++st.step;  // a captured step counts at each replay (below)
      const Tensor& buf = h.momentum != 0.0 ? st.buffers[0] : kNone;
      batches.add(p, buf, first, SgdTensors{p, grad, buf}, i);
    }
    if (graph == nullptr) {
      for (auto& b : batches.list) {
        h.first_step = b.key;
        sgd_step_multi_(b.entries, h);
      }
      continue;
    }
    // Captured: the kernels read lr, momentum and dampening from a block refreshed before every replay, which
    // also counts the replay's step; a change of the flags the kernels were specialised on refuses the replay.
    const size_t unit = optimizer_dynamic_bytes();
    char* block = dynamic_update_block(
        *graph, groups_, g, batches.members(), /*one_step_per_batch=*/false,
        [this, g](size_t i) -> ParamState& { return state(g, i); },
        [this, g](void* dst, int64_t) { write_sgd_dynamic(sgd_hyper(groups_[g]), dst); },
        [this, g, h] {
          const SgdHyper now = sgd_hyper(groups_[g]);
          return (now.weight_decay != 0.0) == (h.weight_decay != 0.0) && (now.momentum != 0.0) == (h.momentum != 0.0) &&
                 now.nesterov == h.nesterov;
        });
    for (size_t k = 0; k < batches.list.size(); ++k) {
      h.first_step = false;
      sgd_step_multi_dynamic_(batches.list[k].entries, h, block + k * unit);
    }
  }
}

// ---- Adam / AdamW ---------------------------------------------------------------------------------------------

namespace {
GroupOptions adam_defaults(const AdamOptions& o, const char* name) {
  VOLT_CHECK(o.lr >= 0 && o.eps >= 0 && o.weight_decay >= 0, name, ": expected lr, eps, weight_decay >= 0, got ",
             o.lr, ", ", o.eps, ", ", o.weight_decay);
  VOLT_CHECK(o.betas.first >= 0 && o.betas.first < 1 && o.betas.second >= 0 && o.betas.second < 1, name,
             ": betas must be in [0, 1), got (", o.betas.first, ", ", o.betas.second, ")");
  GroupOptions d;
  d.beta1 = o.betas.first;
  d.beta2 = o.betas.second;
  d.eps = o.eps;
  d.weight_decay = o.weight_decay;
  d.amsgrad = o.amsgrad;
  return d;
}
AdamOptions from_adamw(const AdamWOptions& o) {
  return {o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.fp32_state, o.stochastic_rounding};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : Adam(std::vector<ParamGroup>{{std::move(params), o.lr, {}}}, o, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(groups), o.lr, adam_defaults(o, decoupled ? "AdamW" : "Adam")), decoupled_(decoupled) {
  fp32_state_ = o.fp32_state;
  stochastic_rounding_ = o.stochastic_rounding;
  rounding_seed_ = default_generator().seed();
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : Adam(std::vector<ParamGroup>{{std::move(params), o.lr, {}}}, from_adamw(o), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o) : Adam(std::move(groups), from_adamw(o), true) {}

namespace {
AdamHyper adam_hyper(const ParamGroup& group, bool decoupled, bool stochastic_rounding, uint64_t seed, size_t g) {
  AdamHyper h;
  h.stochastic_rounding = stochastic_rounding;
  h.rounding_seed = seed + 0xD1B54A32D192ED03ull * (g + 1);  // each group its own stream
  h.lr = group.lr;
  h.beta1 = group.options.beta1.value();
  h.beta2 = group.options.beta2.value();
  h.eps = group.options.eps.value();
  h.weight_decay = group.options.weight_decay.value();
  h.amsgrad = group.options.amsgrad.value();
  h.decoupled_weight_decay = decoupled;
  return h;
}
}  // namespace

std::vector<std::string> Adam::state_names(const ParamGroup& group) const {
  if (group.options.amsgrad.value_or(false)) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  trace::Range range(trace::Layer::optim, decoupled_ ? "[Optimizer]AdamW.step" : "[Optimizer]Adam.step");
  NoGradGuard ng;
  static const Tensor kNone;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    AdamHyper h = adam_hyper(group, decoupled_, stochastic_rounding_, rounding_seed_, g);
    const size_t nbuf = h.amsgrad ? 3 : 2;
    Graph* graph = group.params.empty() ? nullptr : capturing_graph(group.params.front());
    // One multi-tensor update per (device, dtype, state dtype, step count) batch of the group: usually one.
    MultiBatches<AdamTensors, int64_t> batches;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = usable_grad(p, g, i);
      if (!grad.defined()) continue;
      ParamState& st = state(g, i);
      if (graph != nullptr) {
        bool ready = st.buffers.size() >= nbuf;
        for (size_t k = 0; ready && k < nbuf; ++k) ready = st.buffers[k].defined();
        check_capturable(ready, type_name(), g, i);
      }
      ensure_buffers(st, p, nbuf);
      if (graph == nullptr) ++st.step;  // a captured step counts at each replay (below)
      batches.add(p, st.buffers[0], graph == nullptr ? st.step : st.step + 1,
                  AdamTensors{p, grad, st.buffers[0], st.buffers[1], h.amsgrad ? st.buffers[2] : kNone,
                              static_cast<int64_t>(i)},
                  i);
    }
    if (graph == nullptr) {
      for (auto& b : batches.list) {
        h.step = b.key;
        adam_step_multi_(b.entries, h);
      }
      continue;
    }
    // Captured: the kernels read lr and the bias corrections from a block refreshed before every replay, which
    // also counts the replay's step (so checkpoints and schedulers see the same counts as eager training); a
    // change of the flags the kernels were specialised on (weight decay on/off, amsgrad) refuses the replay.
    const size_t unit = optimizer_dynamic_bytes();
    char* block = dynamic_update_block(
        *graph, groups_, g, batches.members(), /*one_step_per_batch=*/true,
        [this, g](size_t i) -> ParamState& { return state(g, i); },
        [this, g](void* dst, int64_t step) {
          AdamHyper now = adam_hyper(groups_[g], decoupled_, stochastic_rounding_, rounding_seed_, g);
          now.step = step;
          write_adam_dynamic(now, dst);
        },
        [this, g, h] {
          const AdamHyper now = adam_hyper(groups_[g], decoupled_, stochastic_rounding_, rounding_seed_, g);
          return (now.weight_decay != 0.0) == (h.weight_decay != 0.0) && now.amsgrad == h.amsgrad;
        });
    for (size_t k = 0; k < batches.list.size(); ++k) {
      h.step = batches.list[k].key;
      adam_step_multi_dynamic_(batches.list[k].entries, h, block + k * unit);
    }
  }
}

}  // namespace volt::optim
