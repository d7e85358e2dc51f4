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
#include <set>
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

namespace detail {
/// Sees every CPU storage allocation and release while it is set (bench_gpt2 --replay-allocator records a CPU
/// step's allocations with it to replay them through the CUDA caching allocator's policy). Called on whichever
/// thread allocates or frees, so an observer serialises itself.
struct AllocationObserver {
  virtual ~AllocationObserver() = default;
  virtual void allocated(const void* ptr, size_t nbytes) = 0;
  virtual void freed(const void* ptr) = 0;
};
/// nullptr stops observing; it does not wait for calls already under way on other threads, so stop (and destroy
/// the observer) only when no other thread allocates or frees. The observer's calls must not throw.
void set_cpu_allocation_observer(AllocationObserver* observer);
}  // namespace detail

/// A block cache over a raw allocator that splits and coalesces. Device-agnostic so that its bookkeeping is tested
/// on the CPU; the CUDA backend instantiates it over cudaMalloc/cudaFree.
///  - Sizes round up to 512 bytes. A request of at most 1 MiB (kSmallRequest) is carved from 2 MiB segments
///    (kSmallSegment) kept for small blocks; a larger one from a cached large block, else from a fresh segment:
///    20 MiB (kMidSegment) shared by requests under 10 MiB, or the request rounded up to 2 MiB.
///  - The smallest free block that holds the request serves it; what is left over is split off as a free block
///    of its own when it is at least 512 bytes (small blocks) or more than 1 MiB (large ones). So a tensor holds
///    its size, not a cached block up to twice it, and `allocated` counts what tensors hold.
///  - A freed block merges with its free neighbours in the same segment (and pool); empty_cache() returns the
///    segments that are wholly free.
///  - Side blocks (allocate_side) are whole segments, never split: a recycled one carries its reader's fence.
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
  void empty_cache();             ///< returns every wholly free segment (and every cached side block)

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
  static constexpr size_t kSmallRequest = size_t(1) << 20;  ///< requests up to this share small segments
  static constexpr size_t kSmallSegment = size_t(2) << 20;  ///< a small-block segment's size
  static constexpr size_t kMidRequest = size_t(10) << 20;   ///< larger requests below this share mid segments
  static constexpr size_t kMidSegment = size_t(20) << 20;   ///< a mid segment's size
  static constexpr size_t kLargeRound = size_t(2) << 20;    ///< a larger block's fresh segment rounds up to this
  /// The segment a fresh compute allocation of `size` (already rounded) takes from the raw allocator.
  static size_t segment_size(size_t size);

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
  // One block of a segment (a raw allocation): segments are chains of blocks in address order.
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    Block* prev = nullptr;  ///< the block below in the same segment (nullptr: the segment's start)
    Block* next = nullptr;  ///< the block above
    bool live = false;
    bool small = false;     ///< carved from a small segment (or a side segment of at most kSmallRequest)
    bool side = false;      ///< a side segment, live or cached in the side pool: never split or merged
    uint64_t pool = 0;      ///< private pool that owns it, 0 for none
    Fence last_reader;      ///< a cached side block's last reader
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeSet = std::set<Block*, BySize>;
  struct Pool {
    FreeSet small, large;
    FreeSet& of(const Block* b) { return b->small ? small : large; }
  };
  Pool& pool_locked(uint64_t id) { return id != 0 ? private_free_.at(id) : general_; }
  // A fresh segment of `size` bytes for a request of `nbytes`; outside a private pool drops the general cache
  // once when out of memory.
  Block* new_segment_locked(size_t size, size_t nbytes, bool small, uint64_t pool);
  // Takes the best-fitting free block of `pool` for `size` (or a fresh segment) and splits off the rest.
  Block* take_locked(size_t size, size_t nbytes, uint64_t pool);
  void mark_live_locked(Block* b, uint64_t pool);
  // Puts the free block `b` into its pool's free set, merged with its free neighbours of the same pool.
  void insert_free_locked(Block* b);
  void drop_cache_locked();
  // Takes `ptr` out of live_; returns its block, its pool set to the one whose free set it joins (0: general).
  Block* release_live_locked(void* ptr, const char* what);

  Pool general_;                                ///< the compute pool
  std::multimap<size_t, Block*> free_side_;     ///< size -> cached side block (its fence on the block)
  std::map<void*, Block*> live_;                ///< block start -> block (every pool)
  std::map<uint64_t, Pool> private_free_;       ///< pool id -> its free blocks
  std::set<Block*> segments_;                   ///< every segment's first block
  uint64_t active_pool_ = 0;
  std::thread::id pool_thread_;  ///< the thread that opened the active pool: only its allocations come from it
  uint64_t next_pool_id_ = 1;
  MemoryStats stats_;
};

}  // namespace volt
