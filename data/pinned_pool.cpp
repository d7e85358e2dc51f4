#include <volt/data/pinned_pool.h>

#include <algorithm>

#include <volt/runtime/allocator.h>

namespace volt::data {

namespace {
size_t round_up(size_t n) { return (std::max<size_t>(n, 1) + 4095) / 4096 * 4096; }
}  // namespace

PinnedPool::PinnedPool(RawAlloc raw) : raw_(std::move(raw)), state_(std::make_shared<State>()) {
  if (!raw_) raw_ = [](size_t n, bool* pinned) { return allocate_pinned(n, pinned); };
}

PinnedPool::~PinnedPool() = default;

PinnedPool& PinnedPool::global() {
  static auto* pool = new PinnedPool();  // leaked on purpose: no teardown after the CUDA runtime's
  return *pool;
}

Tensor PinnedPool::empty(const Shape& shape, DType dtype) {
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * itemsize(dtype);
  const size_t rounded = round_up(nbytes);
  Block block;
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    auto it = state_->free.find(rounded);
    if (it != state_->free.end()) {
      block = std::move(it->second);
      state_->free.erase(it);
    }
  }
  if (block.mem) {
    if (block.last_use) block.last_use->synchronize();  // an async upload may still be reading it
    block.last_use.reset();
  } else {
    block.mem = raw_(rounded, &block.pinned);
    block.nbytes = rounded;
  }
  void* ptr = block.mem.get();
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->live[ptr] = nullptr;
  }
  auto storage = std::make_shared<Storage>();
  storage->nbytes = nbytes;
  storage->device = kCPU;
  storage->pinned = block.pinned;
  // The deleter owns the block; it hands it back to the pool (with its last use) if the pool still exists.
  std::weak_ptr<State> weak = state_;
  storage->data = std::shared_ptr<void>(ptr, [weak, b = std::move(block)](void* p) mutable {
    auto st = weak.lock();
    if (!st) return;  // pool gone: b.mem frees the memory
    std::lock_guard<std::mutex> lk(st->mu);
    auto it = st->live.find(p);
    if (it != st->live.end()) {
      b.last_use = std::move(it->second);
      st->live.erase(it);
    }
    const size_t n = b.nbytes;
    st->free.emplace(n, std::move(b));
  });
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool PinnedPool::record_async_use(const Tensor& host, const Stream& stream) {
  if (!host.defined() || !host.storage()) return false;
  void* base = host.storage()->data.get();
  std::lock_guard<std::mutex> lk(state_->mu);
  auto it = state_->live.find(base);
  if (it == state_->live.end()) return false;
  auto ev = std::make_shared<Event>();
  ev->record(stream);
  it->second = std::move(ev);
  return true;
}

size_t PinnedPool::cached_blocks() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->free.size();
}

size_t PinnedPool::live_blocks() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->live.size();
}

Tensor empty_pinned_batch(const Shape& shape, DType dtype) {
  if (!cuda_available()) return volt::empty(shape, dtype);
  return PinnedPool::global().empty(shape, dtype);
}

}  // namespace volt::data
