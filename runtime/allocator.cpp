#include <volt/runtime/allocator.h>

#include <atomic>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_internal.h>
#include <volt/runtime/error.h>

namespace volt {

namespace {

struct CpuCounters {
  std::atomic<int64_t> allocated{0}, peak{0}, num_allocs{0}, num_system_allocs{0}, cached{0};
};
CpuCounters& cpu_counters() {
  static CpuCounters c;
  return c;
}

// Large CPU blocks (>= 64 KiB) are kept for reuse when freed: glibc serves them with mmap/munmap, and a
// training step that reallocates its gradients each iteration would otherwise page-fault through fresh
// zero pages every time. Small blocks go straight to malloc, which already recycles them cheaply.
constexpr size_t kCacheMin = 64 << 10;
constexpr size_t kCacheMaxBytes = size_t(2) << 30;  // beyond this, freed blocks go back to the system

class CpuBlockCache {
 public:
  static size_t bucket(size_t nbytes) { return (nbytes + 4095) / 4096 * 4096; }
  void* take(size_t size) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cpu_counters().cached.fetch_sub(static_cast<int64_t>(size));
    return p;
  }
  bool give(void* p, size_t size) {
    std::lock_guard<std::mutex> l(mu_);
    if (static_cast<size_t>(cpu_counters().cached.load()) + size > kCacheMaxBytes) return false;
    free_[size].push_back(p);
    cpu_counters().cached.fetch_add(static_cast<int64_t>(size));
    return true;
  }
  void clear() {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) std::free(p);
      cpu_counters().cached.fetch_sub(static_cast<int64_t>(size * blocks.size()));
    }
    free_.clear();
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};
CpuBlockCache& cpu_cache() {
  static CpuBlockCache* c = new CpuBlockCache;  // never destroyed: tensors may be freed during exit
  return *c;
}

void count_alloc(size_t nbytes) {
  auto& c = cpu_counters();
  int64_t now = c.allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t prev = c.peak.load();
  while (now > prev && !c.peak.compare_exchange_weak(prev, now)) {
  }
  c.num_allocs.fetch_add(1);
}

std::atomic<detail::AllocationObserver*> g_cpu_observer{nullptr};

std::shared_ptr<void> cpu_allocate(size_t nbytes) {
  const bool cacheable = nbytes >= kCacheMin;
  const size_t size = cacheable ? CpuBlockCache::bucket(nbytes) : (nbytes + 63) / 64 * 64;
  void* p = cacheable ? cpu_cache().take(size) : nullptr;
  if (p == nullptr) {
    p = std::aligned_alloc(64, size == 0 ? 64 : size);
    VOLT_CHECK(p != nullptr, "allocate: out of CPU memory allocating ", nbytes, " bytes");
    cpu_counters().num_system_allocs.fetch_add(1);
  }
  count_alloc(nbytes);
  if (auto* o = g_cpu_observer.load(std::memory_order_acquire)) o->allocated(p, nbytes);
  return std::shared_ptr<void>(p, [nbytes, size, cacheable](void* q) {
    if (auto* o = g_cpu_observer.load(std::memory_order_acquire)) o->freed(q);
    cpu_counters().allocated.fetch_sub(static_cast<int64_t>(nbytes));
    if (!cacheable || !cpu_cache().give(q, size)) std::free(q);
  });
}

}  // namespace

void detail::set_cpu_allocation_observer(AllocationObserver* observer) {
  g_cpu_observer.store(observer, std::memory_order_release);
}

std::shared_ptr<void> allocate(Device device, size_t nbytes) {
  if (device.is_cuda()) {
    check_device_usable(device, "allocate");
    return detail::cuda_allocate(device.index, nbytes);
  }
  return cpu_allocate(nbytes);
}

std::shared_ptr<void> allocate_for_writer(Device device, size_t nbytes, const Stream& writer) {
  if (device.is_cpu() || writer.device.is_cpu()) return allocate(device, nbytes);
  VOLT_CHECK(writer.device == device, "allocate_for_writer: the writer stream belongs to ", writer.device.str(),
             " but the buffer is on ", device.str(), "; pass a stream of the buffer's device");
  check_device_usable(device, "allocate_for_writer");
  return detail::cuda_allocate_for_writer(device.index, nbytes, writer);
}

std::shared_ptr<void> allocate_pinned(size_t nbytes, bool* pinned) {
  if (void* p = detail::pinned_alloc(nbytes)) {
    if (pinned) *pinned = true;
    return std::shared_ptr<void>(p, [](void* q) { detail::pinned_free(q); });
  }
  if (pinned) *pinned = false;
  return allocate(kCPU, nbytes);
}

MemoryStats memory_stats(Device device) {
  if (device.is_cuda()) return detail::cuda_memory_stats(device.index);
  auto& c = cpu_counters();
  MemoryStats s;
  s.allocated = c.allocated.load();
  s.reserved = s.allocated + c.cached.load();
  s.peak_allocated = c.peak.load();
  s.num_allocs = c.num_allocs.load();
  s.num_system_allocs = c.num_system_allocs.load();
  return s;
}

void reset_peak_memory_stats(Device device) {
  if (device.is_cuda()) return detail::cuda_reset_peak(device.index);
  cpu_counters().peak.store(cpu_counters().allocated.load());
}

void empty_cache(Device device) {
  if (device.is_cuda()) detail::cuda_empty_cache(device.index);
  else cpu_cache().clear();
}

// ---- CachingAllocator ------------------------------------------------------------------------------------

size_t CachingAllocator::round_size(size_t nbytes) { return (nbytes + 511) / 512 * 512; }

size_t CachingAllocator::segment_size(size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kMidRequest) return kMidSegment;
  return (size + kLargeRound - 1) / kLargeRound * kLargeRound;
}

CachingAllocator::~CachingAllocator() {
  // Live blocks belong to tensors that outlive the allocator only at process exit: their segments' memory stays
  // (the bookkeeping goes either way).
  for (Block* head : segments_) {
    bool in_use = false;
    for (Block* b = head; b != nullptr; b = b->next) in_use = in_use || b->live;
    if (!in_use) raw_free_(head->ptr);
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

namespace {
// A side block is a whole segment: the best fit, but never one more than twice the request (it would strand
// memory).
template <class Map>
typename Map::iterator best_fit(Map& blocks, size_t size) {
  auto it = blocks.lower_bound(size);
  return it != blocks.end() && it->first <= 2 * size ? it : blocks.end();
}
}  // namespace

CachingAllocator::Block* CachingAllocator::new_segment_locked(size_t size, size_t nbytes, bool small,
                                                             uint64_t pool) {
  void* p = raw_alloc_(size);
  // Out of memory: drop the cache and retry, except during a private pool (a CUDA graph capture, where the raw
  // free, cudaFree, must not run).
  if (p == nullptr && active_pool_ == 0) {
    drop_cache_locked();
    p = raw_alloc_(size);
  }
  VOLT_CHECK(p != nullptr || active_pool_ == 0, "CachingAllocator: out of device memory during CUDA graph capture "
             "allocating ", nbytes, " bytes (", stats_.allocated, " bytes in use, ", stats_.reserved,
             " reserved; the cache cannot be returned to the driver while capturing): capture a smaller step, or "
             "call empty_cache() before the capture");
  VOLT_CHECK(p != nullptr, "CachingAllocator: out of device memory allocating ", nbytes, " bytes (",
             stats_.allocated, " bytes in use, ", stats_.reserved, " reserved)");
  stats_.reserved += static_cast<int64_t>(size);
  stats_.num_system_allocs++;
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = size;
  b->small = small;
  b->pool = pool;
  segments_.insert(b);
  return b;
}

CachingAllocator::Block* CachingAllocator::take_locked(size_t size, size_t nbytes, uint64_t pool) {
  const bool small = size <= kSmallRequest;
  FreeSet& free_set = small ? pool_locked(pool).small : pool_locked(pool).large;
  Block key;
  key.size = size;
  Block* b = nullptr;
  if (auto it = free_set.lower_bound(&key); it != free_set.end()) {
    b = *it;
    free_set.erase(it);
  } else {
    b = new_segment_locked(segment_size(size), nbytes, small, pool);
  }
  // Split off what the request leaves, when that is worth a block of its own (a large block's spare MiB stays
  // with it, as a small request never takes a large block).
  const size_t rest = b->size - size;
  if (small ? rest >= 512 : rest > kSmallRequest) {
    Block* r = new Block;
    r->ptr = b->ptr + size;
    r->size = rest;
    r->prev = b;
    r->next = b->next;
    r->small = b->small;
    r->pool = b->pool;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    free_set.insert(r);
  }
  return b;
}

void CachingAllocator::mark_live_locked(Block* b, uint64_t pool) {
  b->live = true;
  b->pool = pool;
  live_[b->ptr] = b;
  stats_.allocated += static_cast<int64_t>(b->size);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.num_allocs++;
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t pool = active_pool_ != 0 && std::this_thread::get_id() == pool_thread_ ? active_pool_ : 0;
  Block* b = take_locked(size, nbytes, pool);
  mark_live_locked(b, pool);
  return b->ptr;
}

CachingAllocator::SideBlock CachingAllocator::allocate_side(size_t nbytes) {
  SideBlock sb;
  if (nbytes == 0) return sb;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> l(mu_);
  Block* b = nullptr;
  auto it = active_pool_ == 0 ? best_fit(free_side_, size) : free_side_.end();
  if (it != free_side_.end()) {
    b = it->second;
    sb.wait_for = std::move(b->last_reader);
    b->last_reader = nullptr;
    free_side_.erase(it);
  } else {
    b = new_segment_locked(size, nbytes, size <= kSmallRequest, 0);
    b->side = true;
  }
  // Only the capturing thread's blocks belong to the graph's pool (as in allocate): another thread's upload
  // during a capture stays an ordinary side block.
  mark_live_locked(b, std::this_thread::get_id() == pool_thread_ ? active_pool_ : 0);
  sb.ptr = b->ptr;
  return sb;
}

CachingAllocator::Block* CachingAllocator::release_live_locked(void* ptr, const char* what) {
  auto it = live_.find(ptr);
  VOLT_ASSERT(it != live_.end(), "CachingAllocator::", what, " of a pointer it did not allocate");
  Block* b = it->second;
  live_.erase(it);
  b->live = false;
  stats_.allocated -= static_cast<int64_t>(b->size);
  // Its own pool while that is reserved, else the active pool (which adopts it), else the general pool.
  if (b->pool == 0 || !private_free_.count(b->pool)) b->pool = active_pool_;
  return b;
}

void CachingAllocator::insert_free_locked(Block* b) {
  // The side flag goes: a side block that reaches a compute pool (adopted by a private pool) is an ordinary one.
  b->side = false;
  b->last_reader = nullptr;
  FreeSet& free_set = pool_locked(b->pool).of(b);
  const uint64_t pool = b->pool;  // by value: b may be merged into its lower neighbour, and deleted, below
  auto mergeable = [pool](const Block* n) { return n != nullptr && !n->live && !n->side && n->pool == pool; };
  // `lower` takes in the block above it, which goes.
  auto absorb_next = [](Block* lower) {
    Block* upper = lower->next;
    lower->size += upper->size;
    lower->next = upper->next;
    if (upper->next != nullptr) upper->next->prev = lower;
    delete upper;
  };
  if (Block* p = b->prev; mergeable(p)) {
    free_set.erase(p);
    absorb_next(p);
    b = p;
  }
  if (mergeable(b->next)) {
    free_set.erase(b->next);
    absorb_next(b);
  }
  free_set.insert(b);
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> l(mu_);
  insert_free_locked(release_live_locked(ptr, "free"));
}

void CachingAllocator::free_side(void* ptr, Fence last_reader) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> l(mu_);
  Block* b = release_live_locked(ptr, "free_side");
  // A private pool's blocks are reused only in the captured stream's order: the fence is not needed there.
  if (b->pool != 0 || !b->side) {
    insert_free_locked(b);
    return;
  }
  b->last_reader = std::move(last_reader);
  free_side_.emplace(b->size, b);
}

void CachingAllocator::drop_cache_locked() {
  // The raw free (cudaFree) waits for the device, so a side block's pending reader is done before it goes.
  // Only wholly free segments go; private pools keep their free blocks (their graphs still write them).
  auto drop = [this](Block* b) {
    raw_free_(b->ptr);
    stats_.reserved -= static_cast<int64_t>(b->size);
    segments_.erase(b);
    delete b;
  };
  for (FreeSet* set : {&general_.small, &general_.large}) {
    for (auto it = set->begin(); it != set->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      it = set->erase(it);
      drop(b);
    }
  }
  for (auto& [size, b] : free_side_) drop(b);
  free_side_.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> l(mu_);
  if (active_pool_ == 0) drop_cache_locked();  // no cudaFree during a capture
}

uint64_t CachingAllocator::begin_private_pool() {
  std::lock_guard<std::mutex> l(mu_);
  VOLT_CHECK(active_pool_ == 0, "CachingAllocator::begin_private_pool: private pool ", active_pool_,
             " is still active (a CUDA graph capture is open on this device); end it first, one capture at a time");
  active_pool_ = next_pool_id_++;
  pool_thread_ = std::this_thread::get_id();
  private_free_[active_pool_];
  return active_pool_;
}

void CachingAllocator::end_private_pool() {
  std::lock_guard<std::mutex> l(mu_);
  active_pool_ = 0;
}

void CachingAllocator::release_private_pool(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  if (id == active_pool_) active_pool_ = 0;
  auto it = private_free_.find(id);
  if (it == private_free_.end()) return;
  std::vector<Block*> moved(it->second.small.begin(), it->second.small.end());
  moved.insert(moved.end(), it->second.large.begin(), it->second.large.end());
  private_free_.erase(it);
  // Into the general pool, merged with its free neighbours there (a neighbour still in the pool merges when
  // its own turn comes, as it then finds this one general).
  for (Block* b : moved) {
    b->pool = 0;
    insert_free_locked(b);
  }
}

uint64_t CachingAllocator::active_private_pool() const {
  std::lock_guard<std::mutex> l(mu_);
  return active_pool_;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> l(mu_);
  stats_.peak_allocated = stats_.allocated;
}

}  // namespace volt
