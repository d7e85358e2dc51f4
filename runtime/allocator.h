#pragma once
/// @file
/// Memory for tensor storage.
///  - CPU: 64-byte aligned blocks (vector loads never straddle a cache line at the start of a tensor); blocks
///    of 64 KiB and more are cached for reuse (up to 2 GiB) so steady-state training does not page-fault.
///  - CUDA: a caching allocator per device; freed blocks are kept for reuse instead of going back to the
///    driver, so steady-state training makes no cudaMalloc/cudaFree calls.
///  - Pinned host: page-locked memory when a GPU is usable (asynchronous host-to-device copies), plain aligned
///    memory otherwise.
/// Every device keeps statistics: bytes allocated now, bytes reserved from the system, and the peak.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <volt/runtime/device.h>

namespace volt {

struct MemoryStats {
  int64_t allocated = 0;       ///< bytes handed out to live tensors
  int64_t reserved = 0;        ///< bytes held from the system (allocated + cached)
  int64_t peak_allocated = 0;  ///< high-water mark of `allocated` since the last reset
  int64_t num_allocs = 0;      ///< allocation calls served
  int64_t num_system_allocs = 0;  ///< calls that went to the system allocator (cache misses)
};

/// Storage bytes for `nbytes` on `device`; the deleter returns them to the right allocator.
std::shared_ptr<void> allocate(Device device, size_t nbytes);
/// Page-locked host memory when CUDA is usable, else 64-byte aligned memory; `pinned` reports which.
std::shared_ptr<void> allocate_pinned(size_t nbytes, bool* pinned = nullptr);

MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
/// Returns cached, unused blocks to the system (the driver for a GPU).
void empty_cache(Device device);

/// A size-bucketed block cache over a raw allocator. Device-agnostic so that its bookkeeping is tested on
/// the CPU; the CUDA backend instantiates it over cudaMalloc/cudaFree.
class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;
  using RawFree = std::function<void(void*)>;
  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free) : raw_alloc_(std::move(raw_alloc)),
                                                           raw_free_(std::move(raw_free)) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t nbytes);  ///< sizes round up to 512 bytes; nullptr for 0 bytes
  void free(void* ptr);           ///< keeps the block for reuse
  void empty_cache();             ///< returns every cached block
  MemoryStats stats() const;
  void reset_peak();
  static size_t round_size(size_t nbytes);

 private:
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;  ///< size -> block
  std::map<void*, size_t> live_;              ///< block -> size
  MemoryStats stats_;
};

}  // namespace volt
