#pragma once
// Internal hooks between the allocator and the CUDA runtime wrapper (not part of the public API).
#include <cstddef>
#include <memory>

#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>

namespace volt::detail {
std::shared_ptr<void> cuda_allocate(int device, size_t nbytes);
std::shared_ptr<void> cuda_allocate_for_writer(int device, size_t nbytes, const Stream& writer);
MemoryStats cuda_memory_stats(int device);
void cuda_reset_peak(int device);
void cuda_empty_cache(int device);
void* pinned_alloc(size_t nbytes);  // nullptr when page-locked memory is unavailable
void pinned_free(void* p);           // deferred while a CUDA graph capture is open (note_capture)
// Whether the work before CUDA event `event` (a cudaEvent_t) is done: false while it is not, after clearing the
// "not ready" status the runtime would otherwise leave for the next launch check; throws on a CUDA error.
bool event_done(void* event);

// CUDA graph capture (runtime/cuda_graph.cpp).
CachingAllocator& cuda_device_allocator(int device);  // CUDA builds only
// Whether the compute stream of GPU `device` is capturing; false for a device that is not usable.
bool compute_stream_capturing(int device) noexcept;
// Counts the captures open in the process (begin: true, end or abort: false).
void note_capture(bool open) noexcept;
// Keeps `obj` alive until the private pool of the capture open on `device` is released (release_pool):
// what a captured copy reads is read again at every replay. Defined in cuda_graph.cpp.
void keep_alive_for_capture(int device, std::shared_ptr<void> obj);
}  // namespace volt::detail
