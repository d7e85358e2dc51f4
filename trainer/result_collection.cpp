#include <volt/trainer/result_collection.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include <volt/kernels/ops.h>
#include <volt/nn/metrics.h>
#include <volt/runtime/log.h>
#include <volt/trainer/collectives.h>

namespace volt {

ReduceFx parse_reduce_fx(const std::string& name) {
  // Any case, and "avg" for "mean", as upstream accepts them.
  std::string s = name;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "mean" || s == "avg") return ReduceFx::Mean;
  if (s == "sum") return ReduceFx::Sum;
  if (s == "min") return ReduceFx::Min;
  if (s == "max") return ReduceFx::Max;
  VOLT_FAIL("log: reduce_fx=\"", name, "\" is not supported; expected \"mean\" (or \"avg\"), \"sum\", \"min\" or \"max\" ",
            "(log a metrics::Metric for any other reduction)");
}

HookLogRules hook_log_rules(const std::string& hook) {
  // Step-level training hooks: per step by default.
  static const char* step_hooks[] = {"training_step",      "on_train_batch_start",     "on_train_batch_end",
                                     "on_before_backward", "on_after_backward",        "on_before_optimizer_step",
                                     "on_before_zero_grad", "training_step_end"};
  for (const char* h : step_hooks)
    if (hook == h) return {true, true, false, true};
  static const char* eval_step_hooks[] = {"validation_step", "test_step", "validation_step_end", "test_step_end"};
  for (const char* h : eval_step_hooks)
    if (hook == h) return {true, false, true, true};
  static const char* epoch_hooks[] = {"on_train_epoch_start",      "on_train_epoch_end", "on_validation_epoch_start",
                                      "on_validation_epoch_end",   "on_test_epoch_start", "on_test_epoch_end"};
  for (const char* h : epoch_hooks)
    if (hook == h) return {true, false, true, false};
  return {};
}

// Epoch-level hooks have no batch: their values weigh 1 unless a batch size is given.
static int64_t batch_size_for(const std::string& hook, const std::string& name, const LogOptions& o,
                              int64_t current) {
  int64_t b = o.batch_size.value_or(current > 0 ? current : 1);
  VOLT_CHECK(b > 0, "log(\"", name, "\") in ", hook, ": batch_size=", b, " must be > 0 (it weighs the epoch mean)");
  return b;
}

ResultCollection::Entry& ResultCollection::entry_for(const std::string& hook, const std::string& name,
                                                     const LogOptions& o, bool is_metric) {
  HookLogRules rules = hook_log_rules(hook);
  VOLT_CHECK(rules.allowed, "log(\"", name, "\"): logging is not supported in hook ", hook,
             "; log from training/validation/test steps or the epoch/batch hooks");
  VOLT_CHECK(!name.empty(), "log: the metric name is empty");
  Resolved r;
  r.on_step = o.on_step.value_or(is_metric ? false : rules.default_on_step);
  r.on_epoch = o.on_epoch.value_or(is_metric ? true : rules.default_on_epoch);
  VOLT_CHECK(r.on_step || r.on_epoch, "log(\"", name, "\") in ", hook,
             ": on_step=false and on_epoch=false would record nothing; set at least one of them");
  VOLT_CHECK(!(r.on_step && !rules.step_allowed), "log(\"", name, "\", on_step=true) in ", hook,
             ": an epoch-level hook has no step; use on_epoch=true");
  VOLT_CHECK(!(r.on_step && is_metric), "log(\"", name,
             "\", metric object, on_step=true): metric objects are logged per epoch (compute() at epoch end); "
             "log metric.forward(...) as a tensor for per-step values");
  r.prog_bar = o.prog_bar;
  r.logger = o.logger;
  r.sync_dist = o.sync_dist && !o.rank_zero_only;
  r.rank_zero_only = o.rank_zero_only;
  r.reduce = parse_reduce_fx(o.reduce_fx);
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    Entry& e = *it->second;
    VOLT_CHECK(e.opt.on_step == r.on_step && e.opt.on_epoch == r.on_epoch && e.opt.reduce == r.reduce &&
                   e.opt.sync_dist == r.sync_dist && (e.metric != nullptr) == is_metric,
               "log(\"", name, "\") in ", hook, ": logged again with different on_step/on_epoch/reduce_fx/",
               "sync_dist options than its first log call in this ", stage_, " stage");
    return e;
  }
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->opt = r;
  Entry& ref = *e;
  by_name_[name] = &ref;
  entries_.push_back(std::move(e));
  return ref;
}

void ResultCollection::accumulate(Entry& e, const Tensor* t, double d, int64_t batch_size) {
  // Step value: the latest one logged in this step wins.
  e.has_step = true;
  if (t) {
    e.step_is_tensor = true;
    e.step_t = *t;
  } else {
    e.step_is_tensor = false;
    e.step_d = d;
  }
  if (!e.opt.on_epoch) return;
  double w = e.opt.reduce == ReduceFx::Mean ? static_cast<double>(batch_size) : 1.0;
  if (t && !e.acc_is_tensor) {
    // Promote the host accumulator to a device tensor (so later tensor values need no sync).
    e.acc_t = full({}, e.has_acc ? e.acc_d : 0.0, DType::f64, t->device());
    e.acc_is_tensor = true;
  }
  if (e.acc_is_tensor) {
    NoGradGuard ng;
    Tensor v = t ? cast(*t, DType::f64).reshape({}) : full({}, d, DType::f64, e.acc_t.device());
    if (!e.has_acc) {
      e.acc_t = e.opt.reduce == ReduceFx::Mean ? v * w : v.clone();
    } else {
      switch (e.opt.reduce) {
        case ReduceFx::Mean: e.acc_t = e.acc_t + v * w; break;
        case ReduceFx::Sum: e.acc_t = e.acc_t + v; break;
        case ReduceFx::Min: e.acc_t = minimum(e.acc_t, v); break;
        case ReduceFx::Max: e.acc_t = maximum(e.acc_t, v); break;
      }
    }
  } else {
    if (!e.has_acc) {
      e.acc_d = e.opt.reduce == ReduceFx::Mean ? d * w : d;
    } else {
      switch (e.opt.reduce) {
        case ReduceFx::Mean: e.acc_d += d * w; break;
        case ReduceFx::Sum: e.acc_d += d; break;
        case ReduceFx::Min: e.acc_d = std::min(e.acc_d, d); break;
        case ReduceFx::Max: e.acc_d = std::max(e.acc_d, d); break;
      }
    }
  }
  e.weight += w;
  e.has_acc = true;
}

void ResultCollection::start_recording() {
  recording_ = true;
  recorded_.clear();
}

std::vector<ResultCollection::Recorded> ResultCollection::stop_recording() {
  recording_ = false;
  return std::exchange(recorded_, {});
}

void ResultCollection::replay_logs(const std::vector<Recorded>& logs) {
  for (const Recorded& r : logs) {
    if (r.is_tensor) log(r.hook, r.name, r.t, r.o, r.batch_size);
    else log(r.hook, r.name, r.d, r.o, r.batch_size);
  }
}

void ResultCollection::log(const std::string& hook, const std::string& name, const Tensor& value,
                           const LogOptions& o, int64_t batch_size) {
  if (recording_) {
    VOLT_CHECK(value.defined(), "log(\"", name, "\") in ", hook, ": the value is an undefined tensor");
    recorded_.push_back({hook, name, true, value.detach(), 0.0, o, batch_size});
    return;
  }
  VOLT_CHECK(value.defined(), "log(\"", name, "\") in ", hook, ": the value is an undefined tensor");
  VOLT_CHECK(value.numel() == 1, "log(\"", name, "\") in ", hook, ": expected a scalar (one element) but got a tensor of shape ",
             value.shape_str(), "; reduce it first (e.g. .mean())");
  VOLT_CHECK(value.dtype() != DType::boolean, "log(\"", name, "\") in ", hook, ": bool values are not supported");
  Entry& e = entry_for(hook, name, o, false);
  int64_t b = batch_size_for(hook, name, o, batch_size);
  Tensor t = value.detach();
  if (!is_floating(t.dtype())) {
    // As upstream: reductions need floating values; say so once per name and hook, then convert.
    if (warned_integer_.insert(hook + "/" + name).second)
      logging::warn(fmt::format("log(\"{}\") in {}: the value is an integer tensor ({}); it is converted to f32 to "
                                "be reduced (convert it yourself to silence this warning)",
                                name, hook, dtype_name(t.dtype())));
    t = t.to(DType::f32);
  }
  accumulate(e, &t, 0.0, b);
}

void ResultCollection::log(const std::string& hook, const std::string& name, double value, const LogOptions& o,
                           int64_t batch_size) {
  if (recording_) {  // a host number is taken as captured at every replay
    recorded_.push_back({hook, name, false, Tensor(), value, o, batch_size});
    return;
  }
  Entry& e = entry_for(hook, name, o, false);
  int64_t b = batch_size_for(hook, name, o, batch_size);
  accumulate(e, nullptr, value, b);
}

void ResultCollection::log_metric(const std::string& hook, const std::string& name, metrics::Metric& metric,
                                  const LogOptions& o) {
  VOLT_CHECK(!recording_, "log(\"", name, "\") in ", hook, ": a metric object cannot be logged from a captured "
             "training step (its update would be replayed into state that the epoch's reset replaces); log it from "
             "training_step_end, or turn cuda_graphs off");
  Entry& e = entry_for(hook, name, o, true);
  VOLT_CHECK(e.metric == nullptr || e.metric == &metric, "log(\"", name,
             "\"): a different metric object was already logged under this name");
  e.metric = &metric;
}

void ResultCollection::begin_step() {
  for (auto& e : entries_) e->has_step = false;
}

void ResultCollection::end_step(Collectives& strategy) {
  if (strategy.world_size() == 1) return;
  // One collective per op for all of this step's sync_dist values (Mean = Sum / world).
  std::vector<double> sums, mins, maxs;
  std::vector<Entry*> se, mi, ma;
  for (auto& e : entries_) {
    if (!e->has_step || !e->opt.on_step || !e->opt.sync_dist) continue;
    double v = step_value(*e);
    if (e->opt.reduce == ReduceFx::Min) { mins.push_back(v); mi.push_back(e.get()); }
    else if (e->opt.reduce == ReduceFx::Max) { maxs.push_back(v); ma.push_back(e.get()); }
    else { sums.push_back(v); se.push_back(e.get()); }
  }
  if (!sums.empty()) strategy.reduce_values(sums, dist::ReduceOp::Sum);
  if (!mins.empty()) strategy.reduce_values(mins, dist::ReduceOp::Min);
  if (!maxs.empty()) strategy.reduce_values(maxs, dist::ReduceOp::Max);
  double world = strategy.world_size();
  auto store = [](Entry* e, double v) { e->step_is_tensor = false; e->step_d = v; };
  for (size_t i = 0; i < se.size(); ++i)
    store(se[i], se[i]->opt.reduce == ReduceFx::Mean ? sums[i] / world : sums[i]);
  for (size_t i = 0; i < mi.size(); ++i) store(mi[i], mins[i]);
  for (size_t i = 0; i < ma.size(); ++i) store(ma[i], maxs[i]);
}

// What the epoch-end collectives of a collection are made of, in issue order: every rank must bring the same
// list, or the reductions pair unrelated values (or some ranks wait forever, e.g. a rank whose evaluation shard
// is empty logged nothing at all).
static std::string synced_signature(const std::vector<std::string>& parts) {
  std::string sig;
  for (auto& p : parts) sig += (sig.empty() ? "" : ", ") + p;
  return sig;
}

void ResultCollection::compute_epoch(Collectives& strategy) {
  bool distributed = strategy.world_size() > 1;
  if (distributed) {
    std::vector<std::string> parts;
    for (auto& ep : entries_) {
      if (!ep->opt.on_epoch) continue;
      if (ep->metric) parts.push_back(ep->name + " (metric)");
      else if (ep->opt.sync_dist) parts.push_back(ep->name + " (sync_dist)");
    }
    std::string mine = synced_signature(parts);
    std::string ref = strategy.broadcast_string(mine, 0);
    bool differs = strategy.reduce_decision(mine != ref, /*all=*/false);
    VOLT_CHECK(!differs, "Trainer (", stage_, "): at epoch end the ranks hold different synced values (rank 0: [",
               ref, "], rank ", strategy.global_rank(), ": [", mine, "]); every rank must log the same sync_dist ",
               "values and metric objects, in the same order. A rank whose ", stage_ == "train" ? "training" : "evaluation",
               " shard is empty (fewer samples than ranks) logs nothing: use fewer ranks or more samples");
  }
  std::vector<double> sums, mins, maxs;
  struct Slot { Entry* e; size_t num; size_t den; };
  std::vector<Slot> sum_slots, min_slots, max_slots;
  for (auto& ep : entries_) {
    Entry& e = *ep;
    e.has_epoch = false;
    if (!e.opt.on_epoch || e.metric) continue;
    double num = !e.has_acc ? 0.0 : e.acc_is_tensor ? e.acc_t.item() : e.acc_d;
    if (e.opt.sync_dist && distributed) {
      switch (e.opt.reduce) {
        case ReduceFx::Mean:
          sum_slots.push_back({&e, sums.size(), sums.size() + 1});
          sums.push_back(num);
          sums.push_back(e.weight);
          break;
        case ReduceFx::Sum: sum_slots.push_back({&e, sums.size(), SIZE_MAX}); sums.push_back(num); break;
        case ReduceFx::Min:
          min_slots.push_back({&e, mins.size(), SIZE_MAX});
          mins.push_back(e.has_acc ? num : std::numeric_limits<double>::infinity());
          break;
        case ReduceFx::Max:
          max_slots.push_back({&e, maxs.size(), SIZE_MAX});
          maxs.push_back(e.has_acc ? num : -std::numeric_limits<double>::infinity());
          break;
      }
      continue;
    }
    if (distributed && !e.opt.rank_zero_only && strategy.is_global_zero())
      logging::warn_once("on_epoch without sync_dist",
                         fmt::format("\"{}\" is logged on_epoch without sync_dist in a distributed run; each rank "
                                     "keeps its local value (pass LogOptions{{.sync_dist = true}} to reduce it)",
                                     e.name));
    if (!e.has_acc) continue;
    e.epoch_value = e.opt.reduce == ReduceFx::Mean ? num / e.weight : num;
    e.has_epoch = true;
  }
  if (!sums.empty()) strategy.reduce_values(sums, dist::ReduceOp::Sum);
  if (!mins.empty()) strategy.reduce_values(mins, dist::ReduceOp::Min);
  if (!maxs.empty()) strategy.reduce_values(maxs, dist::ReduceOp::Max);
  for (auto& s : sum_slots) {
    if (s.den != SIZE_MAX) {
      if (sums[s.den] <= 0) continue;  // nobody logged it
      s.e->epoch_value = sums[s.num] / sums[s.den];
    } else {
      s.e->epoch_value = sums[s.num];
    }
    s.e->has_epoch = true;
  }
  for (auto& s : min_slots)
    if (std::isfinite(mins[s.num])) { s.e->epoch_value = mins[s.num]; s.e->has_epoch = true; }
  for (auto& s : max_slots)
    if (std::isfinite(maxs[s.num])) { s.e->epoch_value = maxs[s.num]; s.e->has_epoch = true; }
  // Metric objects: compute (their sync hook makes this a collective in DDP) then reset.
  for (auto& ep : entries_) {
    if (!ep->metric) continue;
    strategy.prepare_metric(*ep->metric);
    ep->epoch_value = ep->metric->compute().item();
    ep->has_epoch = true;
    ep->metric->reset();
  }
}

void ResultCollection::reset() {
  entries_.clear();
  by_name_.clear();
}

double ResultCollection::step_value(const Entry& e) { return e.step_is_tensor ? e.step_t.item() : e.step_d; }

bool ResultCollection::has_step_values() const {
  for (auto& e : entries_)
    if (e->has_step && e->opt.on_step) return true;
  return false;
}

std::map<std::string, double> ResultCollection::step_logger_metrics() const {
  std::map<std::string, double> out;
  for (auto& e : entries_)
    if (e->has_step && e->opt.on_step && e->opt.logger) out[forked(*e) ? e->name + "_step" : e->name] = step_value(*e);
  return out;
}
std::map<std::string, double> ResultCollection::step_pbar_metrics() const {
  std::map<std::string, double> out;
  for (auto& e : entries_)
    if (e->has_step && e->opt.on_step && e->opt.prog_bar) out[forked(*e) ? e->name + "_step" : e->name] = step_value(*e);
  return out;
}
std::map<std::string, double> ResultCollection::step_callback_metrics() const {
  std::map<std::string, double> out;
  for (auto& e : entries_) {
    if (!e->has_step || !e->opt.on_step) continue;
    double v = step_value(*e);
    out[e->name] = v;
    if (forked(*e)) out[e->name + "_step"] = v;
  }
  return out;
}
std::map<std::string, double> ResultCollection::epoch_logger_metrics() const {
  std::map<std::string, double> out;
  for (auto& e : entries_)
    if (e->has_epoch && e->opt.logger) out[forked(*e) ? e->name + "_epoch" : e->name] = e->epoch_value;
  return out;
}
std::map<std::string, double> ResultCollection::epoch_pbar_metrics() const {
  std::map<std::string, double> out;
  for (auto& e : entries_)
    if (e->has_epoch && e->opt.prog_bar) out[forked(*e) ? e->name + "_epoch" : e->name] = e->epoch_value;
  return out;
}
std::map<std::string, double> ResultCollection::epoch_callback_metrics() const {
  std::map<std::string, double> out;
  for (auto& e : entries_) {
    if (!e->has_epoch) continue;
    out[e->name] = e->epoch_value;
    if (forked(*e)) out[e->name + "_epoch"] = e->epoch_value;
  }
  return out;
}
std::vector<std::string> ResultCollection::rank_zero_only_names() const {
  std::vector<std::string> out;
  for (auto& e : entries_)
    if (e->opt.rank_zero_only) out.push_back(e->name);
  return out;
}

}  // namespace volt
