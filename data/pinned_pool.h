#pragma once
/// @file
/// A cache of page-locked host blocks for loader batches.
///
/// Why: cudaMallocHost costs tens of microseconds and cudaFreeHost synchronises the whole device, so giving
/// every batch fresh pinned memory (volt::empty_pinned) would stall training once per batch. The pool keeps
/// freed blocks and hands them out again.
///
/// Reuse safety: a batch uploaded with Batch::to(gpu, /*non_blocking=*/true) may still be read by the DMA
/// engine after the host drops it. Batch::to records an event on the copy's stream (record_async_use) and the
/// pool waits for that event before handing the block out again. Code that issues its own asynchronous copies
/// from pool tensors must call record_async_use itself.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <volt/runtime/cuda_api.h>
#include <volt/kernels/tensor.h>

namespace volt::data {

class PinnedPool {
 public:
  /// `raw` returns a block of at least n bytes and sets *pinned; the default is volt::allocate_pinned.
  using RawAlloc = std::function<std::shared_ptr<void>(size_t n, bool* pinned)>;
  explicit PinnedPool(RawAlloc raw = {});
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  /// The process-wide pool the loaders use (never destroyed: blocks may outlive every loader).
  static PinnedPool& global();

  /// An uninitialised contiguous CPU tensor over a pooled block. Its storage reports pinned = true only when
  /// the block is page-locked (a GPU is usable).
  Tensor empty(const Shape& shape, DType dtype);
  /// Marks `host`'s block as read by work queued on `stream`; the block is not reused before that work ends.
  /// Returns false (and does nothing) for tensors that did not come from this pool.
  bool record_async_use(const Tensor& host, const Stream& stream);

  size_t cached_blocks() const;  ///< free blocks waiting for reuse
  size_t live_blocks() const;    ///< blocks owned by live tensors

 private:
  struct Block {
    std::shared_ptr<void> mem;
    size_t nbytes = 0;
    bool pinned = false;
    std::shared_ptr<Event> last_use;  ///< recorded by record_async_use; waited for before reuse
  };
  /// Shared with the storage deleters, which hold it weakly: a block freed after the pool is gone is simply
  /// released to the system.
  struct State {
    std::mutex mu;
    std::multimap<size_t, Block> free;             ///< rounded size -> cached block
    std::map<void*, std::shared_ptr<Event>> live;  ///< block -> last async use (may be null)
  };

  RawAlloc raw_;
  std::shared_ptr<State> state_;
};

/// Batch buffers for a loader with pin_memory: pooled page-locked memory when CUDA is usable, plain memory
/// (volt::empty) otherwise.
Tensor empty_pinned_batch(const Shape& shape, DType dtype);

}  // namespace volt::data
