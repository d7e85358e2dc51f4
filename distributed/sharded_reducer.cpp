#include <volt/distributed/sharded_reducer.h>

#include <algorithm>
#include <sstream>

#include <volt/kernels/ops.h>

namespace volt::dist {

ShardedReducer::ShardedReducer(ProcessGroup& group, std::vector<Param> params, Stage stage, Options options)
    : group_(group), stage_(stage), world_(group.world_size()), rank_(group.rank()) {
  VOLT_CHECK(options.bucket_cap_bytes > 0, "ShardedReducer: bucket_cap_bytes must be > 0");
  std::vector<int> owners;
  for (auto& p : params) {
    VOLT_CHECK(p.param.defined(), "ShardedReducer: parameter '", p.name, "' is undefined");
    if (!p.param.requires_grad()) continue;
    VOLT_CHECK(p.param.is_leaf(), "ShardedReducer: parameter '", p.name, "' is not a leaf tensor (it has a grad_fn)");
    slots_.push_back(Slot{p.name, p.param});
    owners.push_back(p.owner);
  }
  // Reverse registration order: the gradients of the last parameters arrive first in backward.
  size_t bytes = 0;
  for (int i = static_cast<int>(slots_.size()) - 1; i >= 0; --i) {
    Slot& s = slots_[i];
    // A large parameter gets a bucket of its own (as in the DDP reducer); when the world size divides it, its
    // gradient is reduced where backward left it, with no copy into a bucket buffer.
    const bool alone = s.param.nbytes() >= options.in_place_bytes;
    bool fresh = alone || buckets_.empty() || buckets_.back().in_place || bytes >= options.bucket_cap_bytes;
    if (!fresh && !buckets_.back().slots.empty()) {
      const Tensor& last = slots_[buckets_.back().slots.back()].param;
      fresh = last.nbytes() >= options.in_place_bytes;
    }
    if (!fresh) {
      const Bucket& b = buckets_.back();
      const Tensor& first = slots_[b.slots.front()].param;
      fresh = b.owner != owners[i] || first.dtype() != s.param.dtype() || first.device() != s.param.device();
    }
    if (fresh) {
      buckets_.emplace_back();
      buckets_.back().owner = owners[i];
      buckets_.back().in_place = alone && s.param.numel() % world_ == 0;
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    s.bucket = static_cast<int>(buckets_.size()) - 1;
    s.offset = b.numel;
    b.numel += s.param.numel();
    bytes += s.param.nbytes();
    b.slots.push_back(i);
  }
  NoGradGuard ng;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    b.chunk = (b.numel + world_ - 1) / world_;
    const Tensor& first = slots_[b.slots.front()].param;
    b.shard = zeros({b.chunk}, first.dtype(), first.device());
    b.shard.set_requires_grad(true);
  }
  refresh_shards();
  for (size_t i = 0; i < slots_.size(); ++i)
    slots_[i].hook = slots_[i].param.register_grad_ready_hook([this, i](const Tensor&) { on_grad_ready(static_cast<int>(i)); });
  reset_step();
}

ShardedReducer::~ShardedReducer() {
  for (auto& s : slots_) s.param.remove_grad_ready_hook(s.hook);
}

void ShardedReducer::reset_step() {
  step_open_ = false;
  for (auto& s : slots_) s.ready = s.frozen = false;
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.slots.size());
    b.work.reset();
    b.flat = Tensor();
    b.reduced = Tensor();
  }
  next_launch_ = 0;
}

void ShardedReducer::begin_step() {
  step_open_ = true;
  for (auto& s : slots_) {
    if (s.param.requires_grad()) continue;
    s.frozen = s.ready = true;
    --buckets_[s.bucket].pending;
  }
  launch_ready_buckets();  // buckets with nothing trainable
}

void ShardedReducer::on_grad_ready(int i) {
  if (!sync_) return;
  if (!step_open_) begin_step();
  Slot& s = slots_[i];
  VOLT_CHECK(!s.ready, "ShardedReducer: the gradient of parameter '", s.name, "' became ready twice in one synced "
             "step (two backward passes before finalize()); run all but the last micro-batch with sync off");
  Tensor g = s.param.grad();
  VOLT_ASSERT(g.defined(), "grad-ready hook without a gradient for ", s.name);
  Bucket& b = buckets_[s.bucket];
  if (b.in_place) {
    // The bucket is this gradient: reduce it where it is (the engine hands leaves dense gradients nothing else
    // shares, and the parameter lets go of it below).
    NoGradGuard ng;
    b.flat = g.contiguous().view({g.numel()});
  } else {
    NoGradGuard ng;
    if (!b.flat.defined()) {
      b.flat = empty({b.chunk * world_}, s.param.dtype(), s.param.device());
      if (b.chunk * world_ > b.numel) b.flat.narrow(0, b.numel, b.chunk * world_ - b.numel).zero_();
      for (int k : b.slots)
        if (slots_[k].frozen) b.flat.narrow(0, slots_[k].offset, slots_[k].param.numel()).zero_();
    }
    b.flat.narrow(0, s.offset, s.param.numel()).view(s.param.shape()).copy_(g);
  }
  // The full-size gradient is not needed any more: only this rank's slice of the average is kept.
  s.param.set_grad(Tensor());
  s.ready = true;
  if (--b.pending == 0) launch_ready_buckets();
  // MPI's non-blocking collectives advance only inside MPI calls: test the in-flight buckets so that they make
  // progress while backward computes the rest, and release the full-size buffers of those that are done.
  for (size_t k = 0; k < next_launch_; ++k) harvest(buckets_[k], /*wait=*/false);
}

void ShardedReducer::harvest(Bucket& b, bool wait) {
  if (!b.work || (!wait && !b.work->is_completed())) return;
  b.work->wait();
  b.work.reset();
  if (stage_ == Stage::one) b.reduced = b.flat.narrow(0, static_cast<int64_t>(rank_) * b.chunk, b.chunk).clone();
  b.flat = Tensor();
}

void ShardedReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    if (!b.flat.defined()) continue;  // every parameter frozen: nothing to reduce
    if (stage_ == Stage::one) {
      b.work = group_.all_reduce_async(b.flat, ReduceOp::Avg);
    } else {
      b.reduced = empty({b.chunk}, b.flat.dtype(), b.flat.device());
      b.work = group_.reduce_scatter_async(b.flat, b.reduced, ReduceOp::Avg);
    }
  }
}

void ShardedReducer::finalize() {
  if (!sync_ || slots_.empty()) return;
  if (!step_open_) begin_step();
  std::vector<std::string> unused;
  for (auto& s : slots_)
    if (!s.ready) unused.push_back(s.name);
  try {
    // Every rank launched the same prefix of buckets (if its unused set matches), so waiting is safe.
    for (auto& b : buckets_) harvest(b, /*wait=*/true);
  } catch (...) {
    reset_step();
    throw;
  }
  if (!unused.empty()) {
    reset_step();
    std::ostringstream os;
    for (size_t i = 0; i < unused.size(); ++i) os << (i ? ", " : "") << "'" << unused[i] << "'";
    VOLT_FAIL("ShardedReducer::finalize: ", unused.size(), " parameter(s) received no gradient in this synced step: ",
              os.str(), ". Every rank would wait for their buckets forever; make them take part in the loss or set "
              "requires_grad(false)");
  }
  NoGradGuard ng;
  for (auto& b : buckets_)
    if (b.reduced.defined()) b.shard.set_grad(b.reduced);  // a bucket frozen whole keeps its shard's gradient
  reset_step();
}

void ShardedReducer::refresh_shards() {
  NoGradGuard ng;
  for (auto& b : buckets_) {
    const int64_t lo = static_cast<int64_t>(rank_) * b.chunk, hi = lo + b.chunk;
    for (int i : b.slots) {
      const Slot& s = slots_[i];
      const int64_t a = std::max(lo, s.offset), z = std::min(hi, s.offset + s.param.numel());
      if (a >= z) continue;
      b.shard.narrow(0, a - lo, z - a).copy_(s.param.detach().reshape({-1}).narrow(0, a - s.offset, z - a));
    }
  }
}

void ShardedReducer::gather_parameters(int bucket) {
  Bucket& b = buckets_.at(static_cast<size_t>(bucket));
  NoGradGuard ng;
  Tensor all = group_.all_gather(b.shard.detach()).reshape({b.chunk * world_});
  for (int i : b.slots) {
    Slot& s = slots_[i];
    Tensor dst = s.param;
    dst.copy_(all.narrow(0, s.offset, s.param.numel()).view(s.param.shape()));
  }
}

void ShardedReducer::discard_gradients() {
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.set_grad(Tensor());
  for (auto& b : buckets_)
    if (b.shard.grad().defined()) b.shard.set_grad(Tensor());
}

Tensor ShardedReducer::gather_flat(int bucket, const Tensor& shard_like) const {
  const Bucket& b = buckets_.at(static_cast<size_t>(bucket));
  VOLT_CHECK(shard_like.dim() == 1 && shard_like.size(0) == b.chunk, "ShardedReducer::gather_flat: expected a (",
             b.chunk, ",) tensor laid out like bucket ", bucket, "'s shard, got shape ", shard_like.shape_str());
  NoGradGuard ng;
  return group_.all_gather(shard_like.detach().contiguous()).reshape({b.chunk * world_}).narrow(0, 0, b.numel);
}

Tensor ShardedReducer::slice_flat(int bucket, const Tensor& flat) const {
  const Bucket& b = buckets_.at(static_cast<size_t>(bucket));
  VOLT_CHECK(flat.dim() == 1 && flat.size(0) == b.numel, "ShardedReducer::slice_flat: expected a (", b.numel,
             ",) tensor in bucket ", bucket, "'s flat layout, got shape ", flat.shape_str());
  NoGradGuard ng;
  Tensor padded = zeros({b.chunk * world_}, flat.dtype(), flat.device());
  padded.narrow(0, 0, b.numel).copy_(flat);
  return padded.narrow(0, static_cast<int64_t>(rank_) * b.chunk, b.chunk).clone();
}

}  // namespace volt::dist
