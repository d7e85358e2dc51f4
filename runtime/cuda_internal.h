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
void pinned_free(void* p);
}  // namespace volt::detail
