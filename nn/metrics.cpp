// Metric base class, state sync, and the aggregation metrics (mean, sum, max, min).
#include <volt/nn/metrics.h>

#include <cmath>
#include <limits>

#include <volt/kernels/ops.h>
#include <volt/kernels/autograd.h>

namespace volt::metrics {

const char* reduce_name(StateReduce r) {
  switch (r) {
    case StateReduce::Sum: return "sum";
    case StateReduce::Mean: return "mean";
    case StateReduce::Min: return "min";
    case StateReduce::Max: return "max";
    case StateReduce::Cat: return "cat";
  }
  return "?";
}

// ---- states ------------------------------------------------------------------------------------------------

Tensor concat_dim0(const std::vector<Tensor>& pieces) {
  VOLT_CHECK(!pieces.empty(), "concat_dim0: no tensors to concatenate");
  const Tensor& first = pieces[0];
  VOLT_CHECK(first.dim() >= 1, "concat_dim0: pieces must have at least one dim, got shape ", first.shape_str());
  Shape tail(first.shape().begin() + 1, first.shape().end());
  int64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor& p = pieces[i];
    VOLT_CHECK(p.defined(), "concat_dim0: piece ", i, " is undefined");
    Shape t = p.dim() >= 1 ? Shape(p.shape().begin() + 1, p.shape().end()) : Shape{-1};
    VOLT_CHECK(p.dim() >= 1 && t == tail, "concat_dim0: piece ", i, " has shape ", p.shape_str(),
               " but pieces must be (n, ", shape_to_string(tail), ") like piece 0 ", first.shape_str());
    VOLT_CHECK(p.dtype() == first.dtype(), "concat_dim0: piece ", i, " has dtype ", dtype_name(p.dtype()),
               " but piece 0 has ", dtype_name(first.dtype()));
    total += p.size(0);
  }
  if (pieces.size() == 1) return first;
  NoGradGuard ng;
  Shape out_shape = tail;
  out_shape.insert(out_shape.begin(), total);
  Tensor out = empty(out_shape, first.dtype(), first.device());
  int64_t off = 0;
  for (const Tensor& p : pieces) {
    int64_t n = p.size(0);
    if (n == 0) continue;
    Tensor dst = out.narrow(0, off, n);
    dst.copy_(p.detach());
    off += n;
  }
  return out;
}

Tensor MetricState::tensor() const {
  if (reduce != StateReduce::Cat) return value;
  if (parts.empty()) return default_value;
  return concat_dim0(parts);
}

void MetricState::set(const Tensor& t) {
  if (reduce == StateReduce::Cat) {
    parts.assign(1, t);
  } else {
    value = t;
  }
}

MetricState MetricState::clone() const {
  NoGradGuard ng;
  MetricState c;
  c.name = name;
  c.reduce = reduce;
  c.default_value = default_value;
  if (value.defined()) c.value = value.clone();
  for (const Tensor& p : parts) c.parts.push_back(p.clone());
  return c;
}

void sync_states_with(std::vector<MetricState>& states, const AllReduceFn& all_reduce,
                      const AllGatherUnevenFn& all_gather_uneven) {
  VOLT_CHECK(all_reduce && all_gather_uneven, "sync_states_with: both collectives must be given");
  NoGradGuard ng;
  for (MetricState& st : states) {
    Device dev = st.default_value.device();
    DType dt = st.default_value.dtype();
    if (st.reduce == StateReduce::Cat) {
      Tensor local = st.tensor();
      std::vector<Tensor> all = all_gather_uneven(local);
      VOLT_CHECK(!all.empty(), "sync_states_with: all_gather of cat state '", st.name, "' returned no tensors");
      std::vector<Tensor> moved;
      for (const Tensor& t : all) moved.push_back(t.to(dev).to(dt));
      st.set(concat_dim0(moved));
    } else {
      Tensor r = all_reduce(st.value, st.reduce);
      VOLT_CHECK(r.defined() && r.shape() == st.value.shape(), "sync_states_with: all_reduce of state '",
                 st.name, "' returned shape ", r.defined() ? r.shape_str() : std::string("undefined"),
                 ", expected ", st.value.shape_str());
      st.value = r.to(dev).to(dt);
    }
  }
}

// ---- Metric ------------------------------------------------------------------------------------------------

MetricState& Metric::state(const std::string& name) {
  for (MetricState& s : states_)
    if (s.name == name) return s;
  VOLT_FAIL(this->name(), ": no state named '", name, "'");
}

const MetricState& Metric::state(const std::string& name) const {
  return const_cast<Metric*>(this)->state(name);
}

void Metric::add_state(std::string name, Tensor default_value, StateReduce reduce) {
  VOLT_CHECK(default_value.defined(), this->name(), ".add_state: default for '", name, "' is undefined");
  for (const MetricState& s : states_)
    VOLT_CHECK(s.name != name, this->name(), ".add_state: a state named '", name, "' already exists");
  if (reduce == StateReduce::Cat)
    VOLT_CHECK(default_value.dim() >= 1 && default_value.size(0) == 0, this->name(), ".add_state: cat state '",
               name, "' needs an empty default of shape (0, ...), got ", default_value.shape_str());
  NoGradGuard ng;
  MetricState s;
  s.name = std::move(name);
  s.reduce = reduce;
  s.default_value = default_value.detach().to(device_).clone();
  if (reduce != StateReduce::Cat) s.value = s.default_value.clone();
  states_.push_back(std::move(s));
}

void Metric::accumulate(const std::string& name, const Tensor& delta) {
  MetricState& s = state(name);
  NoGradGuard ng;
  Tensor d = delta.detach().to(device_).to(s.value.dtype());
  // Out of place on purpose: forward() and compute() keep handles of earlier values as snapshots.
  switch (s.reduce) {
    case StateReduce::Sum: s.value = add(s.value, d); break;
    case StateReduce::Max: s.value = maximum(s.value, d); break;
    case StateReduce::Min: s.value = minimum(s.value, d); break;
    default:
      VOLT_FAIL(this->name(), ": accumulate() on state '", name, "' with reduce ", reduce_name(s.reduce),
                " (expected sum, max or min; set mean states directly, append to cat states)");
  }
}

void Metric::append(const std::string& name, const Tensor& piece) {
  MetricState& s = state(name);
  VOLT_CHECK(s.reduce == StateReduce::Cat, this->name(), ": append() on state '", name, "' with reduce ",
             reduce_name(s.reduce), " (expected cat)");
  NoGradGuard ng;
  s.parts.push_back(piece.detach().to(device_).to(s.default_value.dtype()));
}

void Metric::update(const Tensor& preds, const Tensor& target) {
  NoGradGuard ng;
  update_impl(preds.defined() ? preds.detach() : preds, target.defined() ? target.detach() : target);
  ++update_count_;
}

Tensor Metric::compute() {
  NoGradGuard ng;
  if (!sync_fn_) return compute_impl();
  // The sync fn may overwrite tensors in place (collectives usually do), so it works on deep copies and the
  // local states come back untouched whatever happens.
  std::vector<MetricState> local = states_;
  std::vector<MetricState> work;
  work.reserve(states_.size());
  for (const MetricState& s : states_) work.push_back(s.clone());
  states_ = std::move(work);
  try {
    sync_fn_(states_);
    VOLT_CHECK(states_.size() == local.size(), name(), ".compute: the sync fn changed the number of states from ",
               local.size(), " to ", states_.size());
    Tensor out = compute_impl();
    states_ = std::move(local);
    return out;
  } catch (...) {
    states_ = std::move(local);
    throw;
  }
}

Tensor Metric::forward(const Tensor& preds, const Tensor& target) {
  NoGradGuard ng;
  std::vector<MetricState> global = states_;  // handles stay valid: updates never write in place
  int64_t count = update_count_;
  reset();
  try {
    update(preds, target);
  } catch (...) {
    states_ = std::move(global);
    update_count_ = count;
    throw;
  }
  Tensor batch_value = compute_impl();
  // Merge the batch states into the accumulated ones (TorchMetrics' rule for mean: a running average over
  // update calls).
  int64_t n = count + 1;
  for (size_t i = 0; i < states_.size(); ++i) {
    MetricState& g = global[i];
    const MetricState& b = states_[i];
    switch (g.reduce) {
      case StateReduce::Sum: g.value = add(g.value, b.value); break;
      case StateReduce::Max: g.value = maximum(g.value, b.value); break;
      case StateReduce::Min: g.value = minimum(g.value, b.value); break;
      case StateReduce::Mean:
        g.value = div(add(mul(g.value.to(DType::f64), static_cast<double>(n - 1)), b.value.to(DType::f64)),
                      static_cast<double>(n))
                      .to(g.value.dtype());
        break;
      case StateReduce::Cat: g.parts.insert(g.parts.end(), b.parts.begin(), b.parts.end()); break;
    }
  }
  states_ = std::move(global);
  update_count_ = n;
  return batch_value;
}

void Metric::reset() {
  NoGradGuard ng;
  for (MetricState& s : states_) {
    s.parts.clear();
    if (s.reduce != StateReduce::Cat) s.value = s.default_value.clone();
  }
  update_count_ = 0;
}

Metric& Metric::to(Device device) {
  NoGradGuard ng;
  for (MetricState& s : states_) {
    s.default_value = s.default_value.to(device);
    if (s.value.defined()) s.value = s.value.to(device);
    for (Tensor& p : s.parts) p = p.to(device);
  }
  device_ = device;
  return *this;
}

// ---- aggregation -------------------------------------------------------------------------------------------

namespace {
// Applies the NaN strategy to (values, weights); weights may be empty (all ones).
void filter_nan(const std::string& who, NanStrategy nan, std::vector<double>& v, std::vector<double>* w) {
  if (nan == NanStrategy::Propagate) return;
  size_t k = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      VOLT_CHECK(nan != NanStrategy::Error, who, ".update: value ", i, " is NaN (nan strategy is Error)");
      continue;
    }
    v[k] = v[i];
    if (w) (*w)[k] = (*w)[i];
    ++k;
  }
  v.resize(k);
  if (w) w->resize(k);
}
}  // namespace

MeanMetric::MeanMetric(NanStrategy nan) : nan_(nan) {
  add_state("mean_value", scalar_tensor(0.0, DType::f64), StateReduce::Sum);
  add_state("weight", scalar_tensor(0.0, DType::f64), StateReduce::Sum);
}

void MeanMetric::update(double value, double weight) {
  Metric::update(scalar_tensor(value, DType::f64), scalar_tensor(weight, DType::f64));
}

void MeanMetric::update_impl(const Tensor& value, const Tensor& weight) {
  VOLT_CHECK(value.defined(), "MeanMetric.update: value is undefined");
  std::vector<double> v = value.to_vector<double>();
  std::vector<double> w;
  if (!weight.defined()) {
    w.assign(v.size(), 1.0);
  } else if (weight.numel() == 1) {
    w.assign(v.size(), weight.item());
  } else {
    VOLT_CHECK(weight.shape() == value.shape(), "MeanMetric.update: weight has shape ", weight.shape_str(),
               " but value has shape ", value.shape_str(), "; expected one element or the shape of value");
    w = weight.to_vector<double>();
  }
  filter_nan("MeanMetric", nan_, v, &w);
  double sum_vw = 0, sum_w = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum_vw += v[i] * w[i];
    sum_w += w[i];
  }
  accumulate("mean_value", scalar_tensor(sum_vw, DType::f64));
  accumulate("weight", scalar_tensor(sum_w, DType::f64));
}

Tensor MeanMetric::compute_impl() {
  double s = state("mean_value").value.item(), w = state("weight").value.item();
  return scalar_tensor(s / w, DType::f32, device());  // 0/0 is NaN: the mean of nothing
}

ScalarAggregate::ScalarAggregate(StateReduce reduce, NanStrategy nan, std::string name)
    : reduce_(reduce), nan_(nan), name_(std::move(name)) {
  double init = reduce == StateReduce::Max   ? -std::numeric_limits<double>::infinity()
                : reduce == StateReduce::Min ? std::numeric_limits<double>::infinity()
                                             : 0.0;
  add_state("value", scalar_tensor(init, DType::f64), reduce);
}

void ScalarAggregate::update(double value) { Metric::update(scalar_tensor(value, DType::f64)); }

void ScalarAggregate::update_impl(const Tensor& value, const Tensor& unused) {
  VOLT_CHECK(value.defined(), name_, ".update: value is undefined");
  VOLT_CHECK(!unused.defined(), name_, ".update: takes one tensor, got a second one of shape ", unused.shape_str());
  std::vector<double> v = value.to_vector<double>();
  filter_nan(name_, nan_, v, nullptr);
  if (v.empty()) return;
  double acc = reduce_ == StateReduce::Sum ? 0.0 : v[0];
  bool saw_nan = false;
  for (double x : v) {
    saw_nan |= std::isnan(x);
    if (reduce_ == StateReduce::Sum) acc += x;
    else if (reduce_ == StateReduce::Max) acc = std::max(acc, x);
    else acc = std::min(acc, x);
  }
  if (saw_nan) acc = std::numeric_limits<double>::quiet_NaN();
  MetricState& s = state("value");
  double cur = s.value.item();
  // Host arithmetic keeps NaN propagation explicit (device max/min need not propagate NaN).
  double next = reduce_ == StateReduce::Sum ? cur + acc
                : (std::isnan(cur) || std::isnan(acc))
                    ? std::numeric_limits<double>::quiet_NaN()
                    : (reduce_ == StateReduce::Max ? std::max(cur, acc) : std::min(cur, acc));
  s.value = scalar_tensor(next, DType::f64, device());
}

Tensor ScalarAggregate::compute_impl() { return scalar_tensor(state("value").value.item(), DType::f32, device()); }

}  // namespace volt::metrics
