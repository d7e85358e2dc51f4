#include <volt/trainer/strategies/data_parallel.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <volt/kernels/autograd.h>
#include <volt/kernels/ops.h>
#include <volt/nn/layers/batchnorm.h>
#include <volt/nn/replica.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/generator.h>
#include <volt/trainer/strategies/module_replicas.h>

namespace volt::detail {

namespace {

thread_local ReplicaLogs* t_logs = nullptr;

class ReplicaLogScope {
 public:
  explicit ReplicaLogScope(ReplicaLogs* logs) : prev_(t_logs) { t_logs = logs; }
  ~ReplicaLogScope() { t_logs = prev_; }
  ReplicaLogScope(const ReplicaLogScope&) = delete;
  ReplicaLogScope& operator=(const ReplicaLogScope&) = delete;

 private:
  ReplicaLogs* prev_;
};

class GradModeScope {
 public:
  explicit GradModeScope(bool on) : prev_(autograd::grad_enabled()) { autograd::set_grad_enabled(on); }
  ~GradModeScope() { autograd::set_grad_enabled(prev_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool prev_;
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string keys_of(const StepOutput& o) {
  std::string s;
  for (const auto& [k, v] : o) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return "{" + s + "}";
}

Tensor split_part(const Tensor& t, int64_t start, int64_t len, int64_t total, const std::string& what) {
  if (!t.defined()) return t;
  VOLT_CHECK(t.dim() >= 1 && t.size(0) == total, "dp: cannot split the batch: ", what, " has shape ", t.shape_str(),
             " but the batch has ", total, " samples (every tensor of a batch needs them along dim 0)");
  return t.narrow(0, start, len);
}

}  // namespace

ReplicaLogs* replica_logs() { return t_logs; }

std::vector<data::Batch> split_batch(const data::Batch& batch, int n) {
  VOLT_CHECK(n >= 1, "dp: the batch must be split over at least one device, got ", n);
  const int64_t total = batch.input.defined() && batch.input.dim() >= 1 ? batch.input.size(0) : 0;
  if (n == 1 || total == 0) return {batch};
  const int64_t chunk = (total + n - 1) / n;
  std::vector<data::Batch> out;
  for (int64_t start = 0; start < total; start += chunk) {
    const int64_t len = std::min(chunk, total - start);
    data::Batch b;
    b.input = split_part(batch.input, start, len, total, "input");
    b.target = split_part(batch.target, start, len, total, "target");
    for (const auto& [k, v] : batch.fields) b.fields[k] = split_part(v, start, len, total, "field \"" + k + "\"");
    out.push_back(std::move(b));
  }
  return out;
}

StepOutput gather_step_outputs(const std::vector<StepOutput>& outputs) {
  VOLT_CHECK(!outputs.empty(), "dp: no replica outputs to gather");
  if (outputs.size() == 1 && outputs[0].empty()) return {};
  for (size_t r = 1; r < outputs.size(); ++r) {
    bool same = outputs[r].size() == outputs[0].size();
    for (auto a = outputs[0].begin(), b = outputs[r].begin(); same && a != outputs[0].end(); ++a, ++b)
      same = a->first == b->first;
    VOLT_CHECK(same, "dp: replica ", r, "'s step returned the keys ", keys_of(outputs[r]), " but replica 0's returned ",
               keys_of(outputs[0]), "; every replica's step must return the same keys");
  }
  StepOutput gathered;
  for (const auto& [key, first] : outputs[0]) {
    std::vector<Tensor> parts;
    size_t scalars = 0;
    for (const StepOutput& o : outputs) {
      const Tensor& t = o.at(key);
      if (t.defined()) {
        parts.push_back(t);
        scalars += t.dim() == 0 ? 1 : 0;
      }
    }
    if (parts.empty()) {
      gathered[key] = Tensor();
      continue;
    }
    VOLT_CHECK(parts.size() == outputs.size(), "dp: output \"", key, "\" is undefined in ",
               outputs.size() - parts.size(), " of ", outputs.size(), " replicas; a step must return it in all or none");
    VOLT_CHECK(scalars == 0 || scalars == parts.size(), "dp: output \"", key, "\" is 0-d in some replicas and not in ",
               "others; it is gathered by stacking 0-d tensors or concatenating along dim 0, not both");
    gathered[key] = scalars ? stack(parts, 0) : cat(parts, 0);
  }
  return gathered;
}

void merge_replica_logs(TrainModule& module, const std::vector<ReplicaLogs>& logs) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ReplicaLogRecord*>> by_name;
  for (const ReplicaLogs& l : logs)
    for (const ReplicaLogRecord& rec : l.records) {
      auto& list = by_name[rec.name];
      if (list.empty()) order.push_back(rec.name);
      list.push_back(&rec);
    }
  for (const std::string& name : order) {
    const auto& recs = by_name[name];
    const ReplicaLogRecord& first = *recs.front();
    if (first.metric) {
      module.log(name, *first.metric, first.options);
      continue;
    }
    std::string fx = first.options.reduce_fx;
    for (const ReplicaLogRecord* r : recs)
      VOLT_CHECK(r->options.reduce_fx == fx && !r->metric, "log(\"", name, "\") under dp: the replicas logged it with ",
                 "different reduce_fx or as a metric object and a value (\"", fx, "\" and \"", r->options.reduce_fx,
                 "\"); log it the same way in every replica");
    if (recs.size() == 1) {
      module.log(name, first.value, first.options);
      continue;
    }
    const Device dev = first.value.device();
    std::vector<Tensor> values;
    int64_t total = 0;
    for (const ReplicaLogRecord* r : recs) {
      values.push_back(r->value.detach().to(dev).to(DType::f64).reshape({}));
      total += r->batch_size;
    }
    Tensor merged;
    if (fx == "sum") {
      merged = stack(values, 0).sum();
    } else if (fx == "min") {
      merged = min(stack(values, 0));
    } else if (fx == "max") {
      merged = max(stack(values, 0));
    } else if (fx == "mean" || fx == "avg") {
      Tensor acc = values[0] * static_cast<double>(recs[0]->batch_size);
      for (size_t i = 1; i < values.size(); ++i) acc = acc + values[i] * static_cast<double>(recs[i]->batch_size);
      merged = acc / static_cast<double>(total);
    } else {
      merged = values[0];  // an unknown reduce_fx: the result collection names it
    }
    LogOptions o = first.options;
    o.batch_size = total;
    module.log(name, merged, o);
  }
}

ReplicaPool::ReplicaPool(int workers) {
  VOLT_CHECK(workers >= 0, "dp: a replica pool needs >= 0 worker threads, got ", workers);
  threads_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(i); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::loop(int worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    work_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (worker + 1 >= active_) continue;  // this step has fewer replicas
    const std::function<void(int)>* job = job_;
    l.unlock();
    (*job)(worker + 1);
    l.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

void ReplicaPool::run(int n, const std::function<void(int)>& fn) {
  VOLT_ASSERT(n >= 1 && n - 1 <= workers(), "ReplicaPool::run: ", n, " replicas for ", workers(), " workers");
  if (n > 1) {
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = &fn;
      active_ = n;
      pending_ = n - 1;
      ++generation_;
    }
    work_.notify_all();
  }
  fn(0);
  if (n > 1) {
    std::unique_lock<std::mutex> l(mu_);
    done_.wait(l, [&] { return pending_ == 0; });
    job_ = nullptr;
  }
}

StepOutput run_replicas(TrainModule& module, const data::Batch& batch, const StepFn& step, ReplicaPool& pool,
                        ModuleReplicas* replicas) {
  VOLT_ASSERT(!replicas || replicas->size() == pool.workers(), "run_replicas: ", replicas->size(), " replicas for ",
              pool.workers(), " workers");
  std::vector<data::Batch> slices = split_batch(batch, pool.workers() + 1);
  const int n = static_cast<int>(slices.size());
  if (n == 1) {
    nn::ReplicaScope replica(0);
    return gather_step_outputs({step(module, slices[0])});
  }
  for (auto& [name, child] : module.named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNormBase*>(child))
      VOLT_CHECK(!bn->synced(), "dp: ", name.empty() ? bn->type_name() : name, " uses synchronised batch norm ",
                 "(sync_batchnorm), which cannot run inside data-parallel replicas; use strategy=\"ddp\" with "
                 "sync_batchnorm, or turn sync_batchnorm off");
  const bool grad = autograd::grad_enabled();
  const AutocastState autocast = autocast_state();
  // Every parameter's gradient accumulator exists before the replicas share it: they only read it then, and the
  // engine sums all replicas' contributions in that one node (so grad-ready hooks fire once per parameter).
  if (grad)
    for (const Tensor& p : module.parameters())
      if (p.requires_grad()) autograd::gradient_edge(p);
  // Replica r > 0 draws from its own stream, fixed by the global seed, a counter reserved now and r, so runs
  // repeat exactly whatever the threads' timing; replica 0 keeps the global generator (one replica = one device).
  Generator& global = default_generator();
  const uint64_t seed = global.seed(), base = global.reserve(1);
  std::vector<std::unique_ptr<Generator>> gens;
  for (int r = 1; r < n; ++r)
    gens.push_back(std::make_unique<Generator>(splitmix64(seed ^ splitmix64(base * 1024 + static_cast<uint64_t>(r)))));
  // Each replica numbers its graph nodes from its own range (kernels/autograd.h), so the single backward sums
  // the replicas' gradients in one order whatever the threads' timing: runs repeat bit for bit.
  constexpr uint64_t kNodesPerReplica = uint64_t{1} << 28;
  const uint64_t first_node = grad ? autograd::reserve_sequence_numbers(kNodesPerReplica * static_cast<uint64_t>(n)) : 0;
  std::vector<StepOutput> outs(static_cast<size_t>(n));
  std::vector<ReplicaLogs> logs(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::function<void(int)> run = [&](int r) {
    try {
      nn::ReplicaScope replica(r);
      GradModeScope grad_mode(grad);
      autograd::SequenceRangeScope numbering(first_node + kNodesPerReplica * static_cast<uint64_t>(r));
      std::optional<AutocastGuard> ac;
      if (autocast.enabled) ac.emplace(true, autocast.dtype);
      ThreadGeneratorScope stream(r == 0 ? nullptr : gens[static_cast<size_t>(r - 1)].get());
      logs[r].slice_size = slices[r].size();
      ReplicaLogScope log_scope(&logs[r]);
      if (!replicas || r == 0) {
        outs[r] = step(module, slices[r]);
        return;
      }
      DeviceScope device(replicas->device(r));
      replicas->sync(r);
      outs[r] = step(replicas->module(r), slices[r].to(replicas->device(r)));
      for (auto& [key, t] : outs[r])  // differentiable copies: the backward runs back to this device
        if (t.defined()) t = t.to(replicas->device(0));
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  pool.run(n, run);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  merge_replica_logs(module, logs);
  return gather_step_outputs(outs);
}

}  // namespace volt::detail
