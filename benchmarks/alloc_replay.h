#pragma once
// Records a run's CPU storage allocations and replays them through two device allocator policies, with the bytes
// the tensors asked for beside them (bench_gpt2 --replay-allocator; a single-threaded run: see
// set_cpu_allocation_observer):
//  - "split": volt::CachingAllocator, the CUDA caching allocator's policy (2 MiB segments for small requests,
//    blocks split and merged), over a raw allocator that only hands out addresses;
//  - "whole": the policy it replaced, the reference: every block a whole raw allocation of the rounded request,
//    a freed one reused by a request of at least half its size (the best fit), never split.
// The CPU run's allocations are not a GPU run's (the CPU multiplies f32 copies of half operands, and its
// attention is not cuDNN's), so the replay compares the policies on one sequence, not the devices.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <volt/runtime/allocator.h>

namespace volt::bench {

class AllocationReplay : public detail::AllocationObserver {
 public:
  struct Result {
    int64_t requested_peak = 0;  // the largest sum of live requests (unrounded) from the mark on
    int64_t split_peak = 0, split_reserved = 0;  // CachingAllocator's peak_allocated and reserved at the end
    int64_t whole_peak = 0, whole_reserved = 0;  // the same for the whole-block reference
  };

  AllocationReplay() { detail::set_cpu_allocation_observer(this); }
  ~AllocationReplay() override { stop(); }
  void stop() { detail::set_cpu_allocation_observer(nullptr); }
  // Peaks are taken from here on (after the warm-up steps, as the benchmark's own peak).
  void mark() {
    std::lock_guard<std::mutex> l(mu_);
    mark_ = events_.size();
  }

  // Zero-byte storage (an empty tensor) holds nothing: not recorded. Out of memory for the record, the replay is
  // refused (an observer must not throw into the allocator).
  void allocated(const void* ptr, size_t nbytes) override {
    if (nbytes == 0) return;
    std::lock_guard<std::mutex> l(mu_);
    try {
      const int64_t id = next_id_++;
      ids_[ptr] = id;
      events_.push_back({id, nbytes});
    } catch (...) {
      incomplete_ = true;
    }
  }
  void freed(const void* ptr) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = ids_.find(ptr);
    if (it == ids_.end()) return;  // allocated before the recording began, or empty
    try {
      events_.push_back({it->second, 0});
    } catch (...) {
      incomplete_ = true;
    }
    ids_.erase(it);
  }

  Result replay() {
    stop();
    std::lock_guard<std::mutex> l(mu_);
    if (incomplete_) throw std::runtime_error("--replay-allocator: out of memory recording the allocations");
    Result r;
    int64_t next_address = 0x10000;
    CachingAllocator split([&](size_t n) -> void* {
                             void* p = reinterpret_cast<void*>(next_address);
                             next_address += static_cast<int64_t>(n) + 4096;
                             return p;
                           },
                           [](void*) {});
    WholeBlocks whole;
    std::unordered_map<int64_t, std::pair<void*, size_t>> live;  // id -> split's block and the request
    int64_t requested = 0;
    for (size_t i = 0; i < events_.size(); ++i) {
      if (i == mark_) {
        split.reset_peak();
        whole.peak = whole.allocated;
        r.requested_peak = requested;
      }
      const Event& e = events_[i];
      if (e.nbytes > 0) {
        live[e.id] = {split.allocate(e.nbytes), e.nbytes};
        whole.allocate(e.id, e.nbytes);
        requested += static_cast<int64_t>(e.nbytes);
        if (i >= mark_) r.requested_peak = std::max(r.requested_peak, requested);
      } else {
        auto it = live.find(e.id);
        split.free(it->second.first);
        requested -= static_cast<int64_t>(it->second.second);
        live.erase(it);
        whole.free(e.id);
      }
    }
    if (mark_ == events_.size()) {  // nothing after the mark: the peaks are what was live there
      split.reset_peak();
      whole.peak = whole.allocated;
      r.requested_peak = requested;
    }
    r.split_peak = split.stats().peak_allocated;
    r.split_reserved = split.stats().reserved;
    r.whole_peak = whole.peak;
    r.whole_reserved = whole.reserved;
    for (auto& [id, block] : live) split.free(block.first);
    return r;
  }

 private:
  struct Event {
    int64_t id;
    size_t nbytes;  // 0: freed
  };
  struct WholeBlocks {
    std::multimap<size_t, int64_t> free_blocks;  // size -> a cached block (its first owner's id names it)
    std::unordered_map<int64_t, size_t> live;    // allocation id -> its block's size
    int64_t allocated = 0, reserved = 0, peak = 0;
    void allocate(int64_t id, size_t nbytes) {
      size_t size = CachingAllocator::round_size(nbytes);
      auto it = free_blocks.lower_bound(size);
      if (it != free_blocks.end() && it->first <= 2 * size) {
        size = it->first;
        free_blocks.erase(it);
      } else {
        reserved += static_cast<int64_t>(size);
      }
      live[id] = size;
      allocated += static_cast<int64_t>(size);
      peak = std::max(peak, allocated);
    }
    void free(int64_t id) {
      auto it = live.find(id);
      allocated -= static_cast<int64_t>(it->second);
      free_blocks.emplace(it->second, id);
      live.erase(it);
    }
  };

  std::mutex mu_;
  std::unordered_map<const void*, int64_t> ids_;
  std::vector<Event> events_;
  int64_t next_id_ = 0;
  size_t mark_ = 0;
  bool incomplete_ = false;
};

}  // namespace volt::bench
