#include <volt/trainer/strategies/fsdp.h>

#include <algorithm>

#include <volt/kernels/autograd.h>
#include <volt/kernels/ops.h>
#include <volt/nn/optim.h>
#include <volt/runtime/allocator.h>
#include <volt/trainer/train_module.h>

namespace volt {

bool is_fsdp_strategy(const std::string& name) {
  return name == "fsdp" || name == "fsdp_full_shard" || name == "deepspeed_stage_3";
}

FSDPStrategy::FSDPStrategy(const DeviceSelection& devices, FsdpWrapPolicy policy)
    : ZeroStrategy(devices, ZeroStage::two), policy_(std::move(policy)) {}

FSDPStrategy::~FSDPStrategy() {
  // The parameters are held by handles here, the modules are not (they may be gone): teardown() removes the
  // call hooks; only the gradient hooks can be removed safely now.
  for (auto& [p, id] : grad_hooks_) p.remove_grad_ready_hook(id);
}

int FSDPStrategy::shard_unit(const std::string& param_name) const {
  auto it = unit_of_param_.find(param_name);
  return it == unit_of_param_.end() ? root_ : it->second;
}

void FSDPStrategy::bind(TrainModule& module) {
  module_wrap_ = module.fsdp_wrap_modules();
  automatic_optimization_ = module.automatic_optimization;
}

void FSDPStrategy::setup_optimizers(std::vector<std::shared_ptr<optim::Optimizer>>& optimizers) {
  VOLT_CHECK(module() != nullptr, name(), ": setup_optimizers before setup()");
  drop_units();
  FsdpWrapPolicy policy = policy_;
  for (auto& name : module_wrap_)
    if (std::find(policy.modules.begin(), policy.modules.end(), name) == policy.modules.end()) policy.modules.push_back(name);
  std::vector<FsdpUnitPlan> plan = plan_fsdp_units(*module(), policy);
  units_.clear();
  unit_of_param_.clear();
  for (size_t u = 0; u < plan.size(); ++u) {
    Unit unit;
    unit.name = plan[u].name;
    unit.module = plan[u].name.empty() ? nullptr : plan[u].module;
    unit.params = plan[u].params;
    unit.numel = plan[u].numel;
    for (const auto& p : unit.params) unit_of_param_[p] = static_cast<int>(u);
    units_.push_back(std::move(unit));
  }
  root_ = static_cast<int>(units_.size()) - 1;
  ZeroStrategy::setup_optimizers(optimizers);  // the shards now hold this rank's slices of the parameters
  build_units();
}

void FSDPStrategy::build_units() {
  const auto& buckets = reducer()->buckets();
  const auto& slots = reducer()->slots();
  const int world = world_size();
  bucket_state_.assign(buckets.size(), {});
  NoGradGuard ng;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& bucket = buckets[b];
    units_[static_cast<size_t>(unit_of_bucket(static_cast<int>(b)))].buckets.push_back(static_cast<int>(b));
    const Tensor& first = slots[static_cast<size_t>(bucket.slots.front())].param;
    const int64_t n = bucket.chunk * world;
    BucketState& st = bucket_state_[b];
    st.storage = Storage::create(first.device(), static_cast<size_t>(n) * itemsize(first.dtype()));
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = st.storage;
    impl->shape = {n};
    impl->strides = {1};
    impl->dtype = first.dtype();
    st.full = Tensor(impl);
    if (n > bucket.numel) st.full.narrow(0, bucket.numel, n - bucket.numel).zero_();
    // Each parameter becomes a view of the bucket's flat storage (its TensorImpl is edited in place, so the
    // layers' handles and the optimizers' references follow).
    for (int s : bucket.slots) {
      const auto& slot = slots[static_cast<size_t>(s)];
      st.full.narrow(0, slot.offset, slot.param.numel()).view(slot.param.shape()).copy_(slot.param.detach());
      TensorImpl* p = slot.param.impl();
      p->storage = st.storage;
      p->offset = slot.offset;
      p->strides = contiguous_strides(p->shape);
    }
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (unit.module) {
      unit.module->set_call_hook(this);
      unit_of_module_[unit.module] = static_cast<int>(u);
    }
    for (int b : unit.buckets)
      for (int s : buckets[static_cast<size_t>(b)].slots) {
        Tensor p = slots[static_cast<size_t>(s)].param;
        const int unit_index = static_cast<int>(u);
        grad_hooks_.emplace_back(p, p.register_grad_ready_hook([this, unit_index](const Tensor&) {
                                   on_param_grad_ready(unit_index);
                                 }));
        ++unit.num_hooked;
      }
    release(static_cast<int>(u));
  }
}

void FSDPStrategy::drop_units() {
  if (units_.empty()) return;
  // Every parameter keeps its full value in its bucket's storage (a collective: each rank gathers all units).
  for (size_t u = 0; u < units_.size(); ++u) start_gather(static_cast<int>(u));
  for (size_t u = 0; u < units_.size(); ++u) wait_gather(static_cast<int>(u));
  forget_units();
  bucket_state_.clear();
}

void FSDPStrategy::forget_units() noexcept {
  for (auto& [p, id] : grad_hooks_) p.remove_grad_ready_hook(id);
  grad_hooks_.clear();
  for (auto& unit : units_)
    if (unit.module) unit.module->set_call_hook(nullptr);
  units_.clear();
  unit_of_module_.clear();
  unit_of_param_.clear();
  forward_order_.clear();
  last_forward_order_.clear();
  root_ = -1;
}

bool FSDPStrategy::bucket_gathered(int b) const { return bucket_state_[static_cast<size_t>(b)].storage->data != nullptr; }

bool FSDPStrategy::is_gathered(int unit) const {
  for (int b : units_.at(static_cast<size_t>(unit)).buckets)
    if (!bucket_gathered(b)) return false;
  return true;
}

void FSDPStrategy::start_gather(int unit) {
  const auto& buckets = reducer()->buckets();
  for (int b : units_[static_cast<size_t>(unit)].buckets) {
    BucketState& st = bucket_state_[static_cast<size_t>(b)];
    if (st.storage->data) continue;
    st.storage->data = allocate(st.storage->device, st.storage->nbytes);
    st.work = group().all_gather_into_async(buckets[static_cast<size_t>(b)].shard.detach(), st.full);
    ++gathers_;
  }
}

void FSDPStrategy::wait_gather(int unit) {
  for (int b : units_[static_cast<size_t>(unit)].buckets) {
    BucketState& st = bucket_state_[static_cast<size_t>(b)];
    if (!st.work) continue;
    st.work->wait();
    st.work.reset();
  }
}

void FSDPStrategy::release(int unit) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.pinned > 0) return;
  wait_gather(unit);  // a prefetch still writing into the buffer
  for (int b : u.buckets) bucket_state_[static_cast<size_t>(b)].storage->data.reset();
}

void FSDPStrategy::prefetch_next(const std::vector<int>& order, int unit, int step) {
  auto it = std::find(order.begin(), order.end(), unit);
  if (it == order.end()) return;
  const auto pos = (it - order.begin()) + step;
  if (pos < 0 || pos >= static_cast<std::ptrdiff_t>(order.size())) return;
  const int next = order[static_cast<size_t>(pos)];
  const Unit& n = units_[static_cast<size_t>(next)];
  if (step > 0 ? n.depth == 0 : (n.pending > 0 && !n.ranges.empty())) start_gather(next);
}

void FSDPStrategy::before_call(nn::Module& module) {
  auto it = unit_of_module_.find(&module);
  if (it == unit_of_module_.end()) return;
  const int u = it->second;
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.depth++ > 0) return;
  if (std::find(forward_order_.begin(), forward_order_.end(), u) == forward_order_.end()) forward_order_.push_back(u);
  gather(u);
  prefetch_next(last_forward_order_, u, +1);
  unit.range_start = autograd::next_sequence_nr();
}

void FSDPStrategy::after_call(nn::Module& module) {
  auto it = unit_of_module_.find(&module);
  if (it == unit_of_module_.end()) return;
  const int u = it->second;
  Unit& unit = units_[static_cast<size_t>(u)];
  if (--unit.depth > 0) return;
  const uint64_t end = autograd::next_sequence_nr();
  if (end > unit.range_start) unit.ranges.emplace_back(unit.range_start, end);
  release(u);
}

void FSDPStrategy::on_backward_node(const Node& node) {
  const uint64_t seq = node.sequence_nr;
  if (seq == UINT64_MAX) return;  // a gradient accumulator
  // The innermost unit whose forward created the node (a nested unit's call starts later than its parent's).
  int best = -1;
  uint64_t best_start = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    for (auto [lo, hi] : units_[u].ranges)
      if (lo <= seq && seq < hi && (best < 0 || lo >= best_start)) {
        best = static_cast<int>(u);
        best_start = lo;
      }
  if (best < 0 || units_[static_cast<size_t>(best)].pending == 0) return;
  const bool ready = is_gathered(best);
  gather(best);  // completes a prefetch too
  if (!ready) prefetch_next(forward_order_, best, -1);  // backward runs the units in reverse forward order
}

void FSDPStrategy::on_param_grad_ready(int unit) {
  Unit& u = units_[static_cast<size_t>(unit)];
  // A unit's backward is over once all its gradients are complete. The root unit's too under automatic
  // optimisation (training_step has returned); a manually optimised training_step may still read it after
  // manual_backward, so it stays gathered (and is refreshed after each step) until module_step_end.
  if (--u.pending == 0 && (unit != root_ || automatic_optimization_)) release(unit);
}

void FSDPStrategy::backward(const Tensor& loss, bool sync_grad) {
  VOLT_CHECK(reducer() != nullptr, name(), ": backward before setup_optimizers()");
  reducer()->set_sync(sync_grad);
  for (auto& u : units_) u.pending = u.num_hooked;
  autograd::PreNodeHookGuard hook([this](const Node& node) { on_backward_node(node); });
  loss.backward();
}

void FSDPStrategy::finish_gradient_sync() {
  // The shards are the master copy: unlike ZeRO, nothing is refreshed from the (released) parameters.
  if (reducer() && reducer()->sync()) reducer()->finalize();
}

void FSDPStrategy::after_optimizer_step(optim::Optimizer& optimizer) {
  if (!reducer()) return;
  const auto& buckets = reducer()->buckets();
  for (int b : buckets_of(optimizer)) {
    BucketState& st = bucket_state_[static_cast<size_t>(b)];
    if (!st.storage->data) continue;  // released: the next use gathers the new shard
    if (st.work) st.work->wait();
    st.work = group().all_gather_into_async(buckets[static_cast<size_t>(b)].shard.detach(), st.full);
    ++gathers_;
    st.work->wait();
    st.work.reset();
  }
}

void FSDPStrategy::module_step_begin() {
  if (units_.empty()) return;
  if (!forward_order_.empty()) last_forward_order_ = forward_order_;
  forward_order_.clear();
  for (auto& u : units_) {
    u.ranges.clear();
    u.depth = 0;
  }
  gather(root_);
  if (!last_forward_order_.empty()) start_gather(last_forward_order_.front());
}

void FSDPStrategy::module_step_end() {
  for (size_t u = 0; u < units_.size(); ++u) release(static_cast<int>(u));
}

FSDPStrategy::FullParams::FullParams(FSDPStrategy& strategy, bool writeback) : s_(strategy), writeback_(writeback) {
  for (size_t u = 0; u < s_.units_.size(); ++u) {
    if (!s_.is_gathered(static_cast<int>(u))) gathered_.push_back(static_cast<int>(u));
    s_.start_gather(static_cast<int>(u));
  }
  for (size_t u = 0; u < s_.units_.size(); ++u) {
    s_.wait_gather(static_cast<int>(u));
    ++s_.units_[u].pinned;
  }
}

FSDPStrategy::FullParams::~FullParams() {
  if (writeback_ && s_.reducer()) s_.reducer()->refresh_shards();
  for (auto& u : s_.units_) --u.pinned;
  for (int u : gathered_) s_.release(u);
}

nn::StateDict FSDPStrategy::module_state_dict(nn::Module& module) {
  if (units_.empty()) return Strategy::module_state_dict(module);
  FullParams full(*this);
  nn::StateDict sd;
  if (!is_global_zero()) return sd;
  for (auto& [k, t] : module.state_dict()) sd.emplace_back(k, t.clone());  // the storages are freed below
  return sd;
}

std::vector<FSDPStrategy::UnitInfo> FSDPStrategy::units() const {
  std::vector<UnitInfo> out;
  for (const auto& u : units_) out.push_back({u.name, u.params, u.buckets, u.numel});
  return out;
}

void FSDPStrategy::teardown(nn::Module& module) {
  drop_units();  // the module keeps its full parameters
  ZeroStrategy::teardown(module);
}

void FSDPStrategy::abandon(nn::Module& module) noexcept {
  // No gather (a collective): the hooks go, the parameters stay released. An all-gather still in flight (a
  // prefetch) writes into its bucket's buffer until it completes: wait for it (the peers that issued it are
  // normally there: it is bounded by the collective timeout), and if it cannot complete, keep its buffer alive
  // for the rest of the process rather than let the transport write into freed memory.
  for (auto& b : bucket_state_) {
    if (!b.work) continue;
    try {
      b.work->wait();
    } catch (...) {
      // Deliberately never freed: the buffer and the request stay valid for the transport.
      static auto* kept = new std::vector<std::pair<Tensor, std::shared_ptr<dist::Work>>>();
      kept->emplace_back(b.full, b.work);
    }
    b.work.reset();
  }
  forget_units();
}

std::unique_ptr<Strategy> make_fsdp_strategy(const DeviceSelection& devices) {
  return std::make_unique<FSDPStrategy>(devices);
}

}  // namespace volt
