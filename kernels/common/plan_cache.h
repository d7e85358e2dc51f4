#pragma once
// PlanCache: a bounded, thread-safe, least-recently-used cache of expensive per-configuration "plans" (the
// cuDNN convolution algorithm choice, its workspace size and descriptors, keyed by shapes, dtype and
// parameters). Choosing an algorithm costs milliseconds of host time; a training step repeats the same
// shapes, so each configuration is planned once. Host-only code (no CUDA), so it is tested on the CPU.
//
// Values are handed out as shared_ptr<const Value>: a caller keeps its plan alive even if another thread
// evicts it meanwhile. `make` runs under the cache's lock (plans are made rarely; this keeps two threads from
// planning the same key twice).
#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace volt {

// A fixed-length key of integers (shapes, enums, flags) with a hash.
template <size_t N>
struct PlanKey {
  std::array<int64_t, N> v{};
  bool operator==(const PlanKey& o) const { return v == o.v; }
};

template <size_t N>
struct PlanKeyHash {
  size_t operator()(const PlanKey<N>& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit words
    for (int64_t x : k.v) {
      h ^= static_cast<uint64_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

template <class Key, class Value, class Hash>
class PlanCache {
 public:
  explicit PlanCache(size_t capacity = 512) : capacity_(capacity == 0 ? 1 : capacity) {}

  template <class Make>
  std::shared_ptr<const Value> get_or_create(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++hits_;
      order_.splice(order_.begin(), order_, it->second);  // most recently used first
      return it->second->second;
    }
    ++misses_;
    std::shared_ptr<const Value> value = make();
    order_.emplace_front(key, value);
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return order_.size();
  }
  size_t capacity() const { return capacity_; }
  int64_t hits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_;
  }
  int64_t misses() const {
    std::lock_guard<std::mutex> lock(mu_);
    return misses_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    order_.clear();
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<const Value>>;
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<Entry> order_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace volt
