#include <volt/distributed/grad_reducer.h>

#include <chrono>
#include <map>
#include <sstream>

#include <volt/kernels/ops.h>

namespace volt::dist {

GradReducer::GradReducer(ProcessGroup& group, NamedParams params, Options options)
    : group_(group),
      options_(options),
      single_(group.world_size() == 1),
      packed_avg_(options.packed_avg.value_or(group.avg_is_fused())) {
  VOLT_CHECK(options.bucket_cap_bytes > 0, "GradReducer: bucket_cap_bytes must be > 0");
  for (auto& [name, p] : params) {
    VOLT_CHECK(p.defined(), "GradReducer: parameter '", name, "' is undefined");
    if (!p.requires_grad()) continue;
    VOLT_CHECK(p.is_leaf(), "GradReducer: parameter '", name, "' is not a leaf tensor (it has a grad_fn)");
    slots_.push_back(Slot{name, p});
  }
  // Reverse registration order: the gradients of the last parameters arrive first in backward.
  size_t bytes = 0;
  int64_t numel = 0;
  auto close_bucket = [&] {
    // One rank: the layout is kept (bucket_names) but no buffer is ever needed.
    if (buckets_.empty() || buckets_.back().in_place || single_) return;
    const Tensor& first = slots_[buckets_.back().slots[0]].param;
    buckets_.back().flat = empty({numel}, first.dtype(), first.device());
  };
  for (int i = static_cast<int>(slots_.size()) - 1; i >= 0; --i) {
    Slot& s = slots_[i];
    if (s.param.nbytes() >= options.in_place_bytes) {
      close_bucket();
      buckets_.emplace_back();
      buckets_.back().in_place = true;
      buckets_.back().slots.push_back(i);
      s.bucket = static_cast<int>(buckets_.size()) - 1;
      s.offset = 0;
      continue;
    }
    bool fresh = buckets_.empty() || buckets_.back().in_place || bytes >= options.bucket_cap_bytes;
    if (!fresh) {
      const Tensor& first = slots_[buckets_.back().slots.front()].param;
      fresh = first.dtype() != s.param.dtype() || first.device() != s.param.device();
    }
    if (fresh) {
      close_bucket();
      buckets_.emplace_back();
      bytes = 0;
      numel = 0;
    }
    s.bucket = static_cast<int>(buckets_.size()) - 1;
    s.offset = numel;
    numel += s.param.numel();
    bytes += s.param.nbytes();
    buckets_.back().slots.push_back(i);
  }
  close_bucket();
  for (size_t i = 0; i < slots_.size(); ++i)
    slots_[i].hook = slots_[i].param.register_grad_ready_hook([this, i](const Tensor&) { on_grad_ready(static_cast<int>(i)); });
  reset_step();
}

GradReducer::~GradReducer() {
  for (auto& s : slots_) s.param.remove_grad_ready_hook(s.hook);
}

std::vector<std::vector<std::string>> GradReducer::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (int i : b.slots) out.back().push_back(slots_[i].name);
  }
  return out;
}

void GradReducer::reset_step() {
  step_open_ = false;
  for (auto& s : slots_) s.ready = s.frozen = false;
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.slots.size());
    b.work.reset();
    if (b.in_place) b.flat = Tensor();  // the parameter's gradient, not ours to keep
  }
  next_launch_ = 0;
  in_finalize_ = false;
}

void GradReducer::begin_step() {
  step_open_ = true;
  for (auto& s : slots_) {
    if (s.param.requires_grad()) continue;
    s.frozen = s.ready = true;
    if (single_) continue;
    Bucket& b = buckets_[s.bucket];
    --b.pending;
    if (!b.in_place) {
      NoGradGuard ng;
      b.flat.narrow(0, s.offset, s.param.numel()).zero_();  // its share of a bucket reduced for the others
    }
  }
  if (!single_) launch_ready_buckets();  // buckets with nothing trainable
}

void GradReducer::on_grad_ready(int i) {
  if (!sync_) return;
  if (!step_open_) begin_step();
  Slot& s = slots_[i];
  VOLT_CHECK(!s.ready, "GradReducer: the gradient of parameter '", s.name, "' became ready twice in one synced "
             "step (two backward passes before finalize()); run all but the last micro-batch under no_sync()");
  Tensor g = s.param.grad();
  VOLT_ASSERT(g.defined(), "grad-ready hook without a gradient for ", s.name);
  if (single_) {  // the average over one rank is the gradient itself: nothing to copy, launch or scale
    s.ready = true;
    return;
  }
  Bucket& b = buckets_[s.bucket];
  if (b.in_place) {
    // Reduce the gradient where it is. The engine hands leaves dense gradients that nothing else shares.
    if (!g.is_contiguous()) {
      NoGradGuard ng;
      g = g.contiguous();
      s.param.set_grad(g);
    }
    b.flat = g.view({g.numel()});
  } else {
    NoGradGuard ng;
    b.flat.narrow(0, s.offset, s.param.numel()).view(s.param.shape()).copy_(g);
  }
  s.ready = true;
  if (--b.pending == 0) launch_ready_buckets();
  // MPI's non-blocking collectives advance only inside MPI calls: test the in-flight buckets so that they make
  // progress while backward computes the rest.
  for (size_t k = 0; k < next_launch_; ++k)
    if (buckets_[k].work) buckets_[k].work->is_completed();
}

void GradReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    bool trainable = false;
    for (int k : b.slots) trainable = trainable || !slots_[k].frozen;
    if (!trainable) continue;  // every parameter toggled off: nothing to reduce
    // In-place buckets are averaged by the collective itself (no pass of ours over .grad afterwards). Packed
    // buckets are copied out in finalize() anyway: where the backend's Avg is a separate division pass (MPI),
    // they are summed and the division by the world size rides on that copy (one pass instead of two); where
    // Avg is fused into the collective (NCCL), they are averaged and the copy out is a plain copy.
    b.averaged = is_floating(b.flat.dtype()) && (b.in_place || packed_avg_);
    b.work = group_.all_reduce_async(b.flat, b.averaged ? ReduceOp::Avg : ReduceOp::Sum);
    if (!in_finalize_) ++launched_in_backward_;
  }
}

void GradReducer::finalize() {
  if (!sync_ || slots_.empty()) return;
  if (!step_open_) begin_step();
  if (single_) {
    finalize_single();
    return;
  }
  in_finalize_ = true;
  bool waited = false;  // some bucket's collective was waited for (a step whose buckets were all frozen has none)
  double wait_secs = 0;
  std::vector<std::string> unused;
  for (auto& s : slots_)
    if (!s.ready) unused.push_back(s.name);
  try {
    if (!unused.empty() && options_.find_unused_parameters) {
      NoGradGuard ng;
      for (auto& s : slots_) {
        if (s.ready) continue;
        Bucket& b = buckets_[s.bucket];
        if (b.in_place) {
          s.param.set_grad(zeros_like(s.param));
          b.flat = s.param.grad().view({s.param.numel()});
        } else {
          b.flat.narrow(0, s.offset, s.param.numel()).zero_();
        }
        s.ready = true;
        --buckets_[s.bucket].pending;
      }
      launch_ready_buckets();
    }
    // Every rank launched the same prefix of buckets (if its unused set matches), so waiting is safe.
    const auto wait_start = std::chrono::steady_clock::now();
    for (auto& b : buckets_) {
      if (!b.work) continue;
      b.work->wait();
      waited = true;
    }
    wait_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  } catch (...) {
    reset_step();
    throw;
  }
  if (!unused.empty() && !options_.find_unused_parameters) {
    reset_step();
    fail_unused(unused);
  }
  if (waited) {
    ++wait_stats_.steps;
    wait_stats_.seconds += wait_secs;
    wait_stats_.last_seconds = wait_secs;
  }
  NoGradGuard ng;
  const double scale = 1.0 / static_cast<double>(group_.world_size());
  for (auto& s : slots_) {
    if (s.frozen) continue;  // toggled off: no gradient this step
    const Bucket& b = buckets_[s.bucket];
    Tensor red = b.flat.narrow(0, s.offset, s.param.numel()).view(s.param.shape());
    if (b.in_place) {  // the reduction already sits in .grad
      if (!b.averaged) {
        Tensor g = s.param.grad();
        mul_(g, scale);
      }
      continue;
    }
    Tensor g = s.param.grad();
    if (g.defined() && g.shape() == s.param.shape() && g.dtype() == red.dtype() && g.device() == red.device() &&
        g.is_contiguous()) {
      if (b.averaged) g.copy_(red);
      else mul_into_(g, red, scale);  // g = sum / world, one pass
    } else {
      s.param.set_grad(b.averaged ? red.clone() : mul(red, scale));
    }
  }
  reset_step();
}

void GradReducer::finalize_single() {
  // World size 1: .grad already holds the average; only the unused-parameter rule is kept, so that a model
  // that would hang N ranks fails the same way on one.
  std::vector<std::string> unused;
  for (auto& s : slots_)
    if (!s.ready) unused.push_back(s.name);
  if (!unused.empty() && options_.find_unused_parameters) {
    NoGradGuard ng;
    for (auto& s : slots_)  // as with N ranks where every rank left it unused: a zero gradient
      if (!s.ready && !s.param.grad().defined()) s.param.set_grad(zeros_like(s.param));
  }
  reset_step();
  if (!unused.empty() && !options_.find_unused_parameters) fail_unused(unused);
}

void GradReducer::fail_unused(const std::vector<std::string>& unused) {
  std::ostringstream os;
  for (size_t i = 0; i < unused.size(); ++i) os << (i ? ", " : "") << "'" << unused[i] << "'";
  VOLT_FAIL("GradReducer::finalize: ", unused.size(), " parameter(s) received no gradient in this synced step: ",
            os.str(), ". Every rank would wait for their buckets forever; make them take part in the loss, set "
            "requires_grad(false), or enable Options::find_unused_parameters");
}

void broadcast_parameters(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  // Group by (dtype, device) in first-seen order, which is the same on every rank.
  std::vector<std::pair<std::pair<DType, Device>, std::vector<Tensor>>> groups;
  for (const auto& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    auto key = std::make_pair(t.dtype(), t.device());
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == key; });
    if (it == groups.end()) groups.push_back({key, {t}});
    else it->second.push_back(t);
  }
  NoGradGuard ng;
  for (auto& [key, ts] : groups) {
    int64_t total = 0;
    for (auto& t : ts) total += t.numel();
    Tensor flat = empty({total}, key.first, key.second);
    int64_t off = 0;
    for (auto& t : ts) {
      flat.narrow(0, off, t.numel()).view(t.shape()).copy_(t);
      off += t.numel();
    }
    group.broadcast(flat, root);
    off = 0;
    for (auto& t : ts) {
      Tensor dst = t;
      dst.copy_(flat.narrow(0, off, t.numel()).view(t.shape()));
      off += t.numel();
    }
  }
}

}  // namespace volt::dist
