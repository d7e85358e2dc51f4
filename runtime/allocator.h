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
#include <thread>
#include <utility>

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
struct Stream;
/// Storage for a buffer that `writer` (a side stream of `device`, e.g. the copy stream) fills and the compute
/// stream then reads: a loader batch uploaded while the previous step computes. The block comes from a pool kept
/// apart from the compute stream's, so it is never one that kernels already queued on the compute stream may
/// still use, and `writer` need not wait for the compute stream's earlier work. A recycled side block may still
/// be read by compute work queued before it was freed: `writer` is made to wait (an event, not the host) for
/// exactly that work. The caller must make the compute stream wait for `writer` before reading the buffer.
/// The CPU (and a CPU stream): plain allocate().
std::shared_ptr<void> allocate_for_writer(Device device, size_t nbytes, const Stream& writer);
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

  /// Marks the compute stream's work queued up to some point (an Event in the CUDA backend); opaque here.
  using Fence = std::shared_ptr<void>;
  struct SideBlock {
    void* ptr = nullptr;
    Fence wait_for;  ///< null for a fresh block; else the writer must wait for it before writing
  };
  /// The side pool (allocate_for_writer): blocks written by a side stream and read by the compute stream. Side
  /// and compute blocks never trade places: a compute block is reused in compute-stream order with no fence,
  /// which a side-stream writer would break.
  SideBlock allocate_side(size_t nbytes);
  /// Returns a side block with `last_reader`, the fence of the compute work queued when its tensor died (every
  /// kernel that may read it). A null fence only when no reader can be pending.
  void free_side(void* ptr, Fence last_reader);
  MemoryStats stats() const;
  void reset_peak();
  static size_t round_size(size_t nbytes);

  /// Private pools (CUDA graph capture, runtime/cuda_graph.h). From begin_private_pool() to end_private_pool()
  /// every allocate() is served from a new pool: its own free blocks, else a fresh block from the raw allocator;
  /// allocate_side() always takes a fresh block (a side writer runs outside the captured stream, so it must not
  /// get a block the graph reuses). Every block freed while the pool is active joins it, whichever pool it came
  /// from (a side block without its fence: the graph reads it after the work that freed it). A block that
  /// belongs to a pool returns to it when freed, also after end_private_pool(), until release_private_pool()
  /// moves the pool's free blocks to the general pool (its live blocks follow when freed). While a pool is
  /// active nothing is returned to the raw allocator: empty_cache() does nothing and running out of memory
  /// throws instead of dropping the cache. A pool's free blocks are kept by empty_cache() until it is released.
  /// Only the thread that called begin_private_pool() allocates from the pool (the capturing thread: another
  /// thread's tensor must never share memory with the graph's temporaries); other threads allocate from the
  /// general pool meanwhile. One pool at a time is active; ids are never reused.
  uint64_t begin_private_pool();
  void end_private_pool();
  /// Also ends the pool when it is the active one; an unknown (already released) id is ignored.
  void release_private_pool(uint64_t id);
  uint64_t active_private_pool() const;  ///< 0 when none is active

 private:
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  struct FreeSide {
    void* ptr;
    Fence last_reader;
  };
  struct LiveBlock {
    size_t size;
    uint64_t pool;  ///< private pool that owns it, 0 for none
  };
  // A fresh block; outside a private pool drops the general cache once when out of memory.
  void* system_alloc_locked(size_t size, size_t nbytes);
  void mark_live_locked(void* p, size_t size, uint64_t pool);
  void drop_cache_locked();
  // Takes `ptr` out of live_; returns its size and the pool whose free list it joins (0: the general one).
  std::pair<size_t, uint64_t> release_live_locked(void* ptr, const char* what);

  std::multimap<size_t, void*> free_blocks_;  ///< size -> block (compute pool)
  std::multimap<size_t, FreeSide> free_side_;  ///< size -> block and its last reader (side pool)
  std::map<void*, LiveBlock> live_;           ///< block -> size and owner (every pool)
  std::map<uint64_t, std::multimap<size_t, void*>> private_free_;  ///< pool id -> its free blocks
  uint64_t active_pool_ = 0;
  std::thread::id pool_thread_;  ///< the thread that opened the active pool: only its allocations come from it
  uint64_t next_pool_id_ = 1;
  MemoryStats stats_;
};

}  // namespace volt
