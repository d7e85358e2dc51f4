#include <volt/nn/optimizers.h>

#include <cmath>

#include <volt/kernels/graph.h>
#include <volt/kernels/optim_extra.h>
#include <volt/runtime/trace.h>

namespace volt::optim {

namespace {

// A parameter group's updates split into the batches one multi-tensor op can take: entries that share device,
// param dtype, state dtype and `key` (Adagrad's step count), in first-seen order. Usually one.
template <class Entry>
struct Batches {
  struct Batch {
    Device device;
    DType dtype, state_dtype;
    int64_t key;
    std::vector<Entry> entries;
  };
  std::vector<Batch> list;
  void add(const Tensor& p, DType state_dtype, int64_t key, Entry e) {
    for (Batch& b : list)
      if (b.device == p.device() && b.dtype == p.dtype() && b.state_dtype == state_dtype && b.key == key) {
        b.entries.push_back(std::move(e));
        return;
      }
    list.push_back(Batch{p.device(), p.dtype(), state_dtype, key, {std::move(e)}});
  }
};

// State buffer k, created as `init` everywhere in `dt` on the parameter's device (or moved there when the
// parameters moved after it was created).
Tensor ensure_state(std::vector<Tensor>& buffers, size_t k, const Tensor& p, DType dt, double init = 0.0) {
  if (buffers.size() <= k) buffers.resize(k + 1);
  Tensor& b = buffers[k];
  if (b.defined() && (b.device() != p.device() || b.dtype() != dt)) b = b.to(p.device()).to(dt).contiguous();
  if (!b.defined()) b = init == 0.0 ? zeros(p.shape(), dt, p.device()) : full(p.shape(), init, dt, p.device());
  return b;
}

// Only SGD, Adam and AdamW read their per-step values from device memory under capture; a captured step of
// these would replay the captured lr and step count.
void refuse_capture(const std::string& who, const Tensor& p) {
  VOLT_CHECK(Graph::capturing(p.device()) == nullptr, who, ".step under graph capture: only SGD, Adam and AdamW "
             "can be captured (they read lr and the step count from device memory at each replay); step ", who,
             " eagerly (TrainerOptions::cuda_graphs = off)");
}

void check_finite_nonneg(const char* who, const char* name, double v) {
  VOLT_CHECK(std::isfinite(v) && v >= 0.0, who, ": ", name, " must be a finite value >= 0, got ", v);
}

void check_group(const char* who, size_t g, size_t groups) {
  VOLT_CHECK(g < groups, who, ": group ", g, " does not exist; the optimizer has ", groups, " parameter group(s)");
}

}  // namespace

// ---- RMSprop --------------------------------------------------------------------------------------------------

namespace {
GroupOptions rmsprop_defaults(const RMSpropOptions& o) {
  check_finite_nonneg("RMSprop", "lr", o.lr);
  check_finite_nonneg("RMSprop", "eps", o.eps);
  check_finite_nonneg("RMSprop", "weight_decay", o.weight_decay);
  check_finite_nonneg("RMSprop", "momentum", o.momentum);
  VOLT_CHECK(o.alpha >= 0.0 && o.alpha <= 1.0, "RMSprop: alpha must be in [0, 1], got ", o.alpha);
  GroupOptions d;
  d.momentum = o.momentum;
  d.weight_decay = o.weight_decay;
  d.eps = o.eps;
  d.alpha = o.alpha;
  d.centered = o.centered;
  return d;
}
}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions o)
    : RMSprop(std::vector<ParamGroup>{{std::move(params), o.lr, {}}}, o) {}
RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer(std::move(groups), o.lr, rmsprop_defaults(o)) {
  fp32_state_ = o.fp32_state;
}

std::vector<std::string> RMSprop::state_names(const ParamGroup&) const {
  return {"square_avg", "momentum_buffer", "grad_avg"};
}

double RMSprop::alpha(size_t g) const {
  check_group("RMSprop::alpha", g, groups_.size());
  return groups_[g].options.alpha.value();
}
bool RMSprop::centered(size_t g) const {
  check_group("RMSprop::centered", g, groups_.size());
  return groups_[g].options.centered.value();
}
void RMSprop::set_alpha(size_t g, double alpha) {
  check_group("RMSprop::set_alpha", g, groups_.size());
  VOLT_CHECK(alpha >= 0.0 && alpha <= 1.0, "RMSprop::set_alpha: alpha must be in [0, 1], got ", alpha, " for group ",
             g);
  groups_[g].options.alpha = alpha;
}
void RMSprop::set_centered(size_t g, bool c) {
  check_group("RMSprop::set_centered", g, groups_.size());
  groups_[g].options.centered = c;
}

void RMSprop::step() {
  trace::Range range(trace::Layer::optim, "[Optimizer]RMSprop.step");
  NoGradGuard ng;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    RmspropHyper h;
    h.lr = group.lr;
    h.alpha = group.options.alpha.value();
    h.eps = group.options.eps.value();
    h.weight_decay = group.options.weight_decay.value();
    h.momentum = group.options.momentum.value();
    h.centered = group.options.centered.value();
    Batches<RmspropTensors> batches;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = usable_grad(p, g, i);
      if (!grad.defined()) continue;
      refuse_capture(type_name(), p);
      ParamState& st = state(g, i);
      const DType dt = state_dtype(p.dtype());
      Tensor sq = ensure_state(st.buffers, 0, p, dt);
      Tensor buf = h.momentum != 0.0 ? ensure_state(st.buffers, 1, p, dt) : Tensor();
      Tensor ga = h.centered ? ensure_state(st.buffers, 2, p, dt) : Tensor();
      ++st.step;
      batches.add(p, dt, 0, RmspropTensors{p, grad, sq, buf, ga});
    }
    for (auto& b : batches.list) rmsprop_step_multi_(b.entries, h);
  }
}

// ---- Adagrad --------------------------------------------------------------------------------------------------

namespace {
GroupOptions adagrad_defaults(const AdagradOptions& o) {
  check_finite_nonneg("Adagrad", "lr", o.lr);
  check_finite_nonneg("Adagrad", "lr_decay", o.lr_decay);
  check_finite_nonneg("Adagrad", "weight_decay", o.weight_decay);
  check_finite_nonneg("Adagrad", "initial_accumulator_value", o.initial_accumulator_value);
  check_finite_nonneg("Adagrad", "eps", o.eps);
  GroupOptions d;
  d.weight_decay = o.weight_decay;
  d.eps = o.eps;
  d.lr_decay = o.lr_decay;
  d.initial_accumulator_value = o.initial_accumulator_value;
  return d;
}
}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions o)
    : Adagrad(std::vector<ParamGroup>{{std::move(params), o.lr, {}}}, o) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o)
    : Optimizer(std::move(groups), o.lr, adagrad_defaults(o)) {
  fp32_state_ = o.fp32_state;
}

double Adagrad::lr_decay(size_t g) const {
  check_group("Adagrad::lr_decay", g, groups_.size());
  return groups_[g].options.lr_decay.value();
}
double Adagrad::initial_accumulator_value(size_t g) const {
  check_group("Adagrad::initial_accumulator_value", g, groups_.size());
  return groups_[g].options.initial_accumulator_value.value();
}
void Adagrad::set_lr_decay(size_t g, double v) {
  check_group("Adagrad::set_lr_decay", g, groups_.size());
  check_finite_nonneg("Adagrad::set_lr_decay", "lr_decay", v);
  groups_[g].options.lr_decay = v;
}
void Adagrad::set_initial_accumulator_value(size_t g, double v) {
  check_group("Adagrad::set_initial_accumulator_value", g, groups_.size());
  check_finite_nonneg("Adagrad::set_initial_accumulator_value", "initial_accumulator_value", v);
  groups_[g].options.initial_accumulator_value = v;
}

void Adagrad::step() {
  trace::Range range(trace::Layer::optim, "[Optimizer]Adagrad.step");
  NoGradGuard ng;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    AdagradHyper h;
    h.lr = group.lr;
    h.lr_decay = group.options.lr_decay.value();
    h.weight_decay = group.options.weight_decay.value();
    h.eps = group.options.eps.value();
    // One batch per step count: lr_decay makes the step's lr depend on it.
    Batches<AdagradTensors> batches;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = usable_grad(p, g, i);
      if (!grad.defined()) continue;
      refuse_capture(type_name(), p);
      ParamState& st = state(g, i);
      const DType dt = state_dtype(p.dtype());
      Tensor sum = ensure_state(st.buffers, 0, p, dt, group.options.initial_accumulator_value.value());
      ++st.step;
      batches.add(p, dt, st.step, AdagradTensors{p, grad, sum});
    }
    for (auto& b : batches.list) {
      h.step = b.key;
      adagrad_step_multi_(b.entries, h);
    }
  }
}

// ---- Lion -----------------------------------------------------------------------------------------------------

namespace {
GroupOptions lion_defaults(const LionOptions& o) {
  check_finite_nonneg("Lion", "lr", o.lr);
  check_finite_nonneg("Lion", "weight_decay", o.weight_decay);
  VOLT_CHECK(o.betas.first >= 0 && o.betas.first < 1 && o.betas.second >= 0 && o.betas.second < 1,
             "Lion: betas must be in [0, 1), got (", o.betas.first, ", ", o.betas.second, ")");
  GroupOptions d;
  d.beta1 = o.betas.first;
  d.beta2 = o.betas.second;
  d.weight_decay = o.weight_decay;
  return d;
}
}  // namespace

Lion::Lion(std::vector<Tensor> params, LionOptions o) : Lion(std::vector<ParamGroup>{{std::move(params), o.lr, {}}}, o) {}
Lion::Lion(std::vector<ParamGroup> groups, LionOptions o) : Optimizer(std::move(groups), o.lr, lion_defaults(o)) {
  fp32_state_ = o.fp32_state;
}

void Lion::step() {
  trace::Range range(trace::Layer::optim, "[Optimizer]Lion.step");
  NoGradGuard ng;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    LionHyper h;
    h.lr = group.lr;
    h.beta1 = group.options.beta1.value();
    h.beta2 = group.options.beta2.value();
    h.weight_decay = group.options.weight_decay.value();
    Batches<LionTensors> batches;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = usable_grad(p, g, i);
      if (!grad.defined()) continue;
      refuse_capture(type_name(), p);
      ParamState& st = state(g, i);
      const DType dt = state_dtype(p.dtype());
      Tensor m = ensure_state(st.buffers, 0, p, dt);
      ++st.step;
      batches.add(p, dt, 0, LionTensors{p, grad, m});
    }
    for (auto& b : batches.list) lion_step_multi_(b.entries, h);
  }
}

}  // namespace volt::optim
