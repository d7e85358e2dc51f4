#pragma once
// Scratch memory for a backend kernel's own temporaries: cuBLASLt and cuDNN workspaces, split-K and per-block
// partial sums. A backend allocates here, below the ops layer (it never includes the public ops.h to call
// empty()). The bytes come from the device's caching allocator (runtime/allocator.h) like every tensor's, and are
// stream-ordered the same way: a freed block is reused in the order of the stream the call's kernels are queued
// on, so a kernel may drop its scratch tensor as soon as the work reading it is queued.
#include <cstddef>
#include <cstdint>

#include <volt/kernels/tensor.h>

namespace volt::backend {

// An uninitialised contiguous tensor of `shape` and `dtype` on `device`.
inline Tensor scratch(const Shape& shape, DType dtype, Device device) { return empty(shape, dtype, device); }

// At least `nbytes` uninitialised bytes on `device` (one byte when nbytes is 0, so the pointer is never null),
// as a u8 tensor that owns them.
inline Tensor scratch_bytes(size_t nbytes, Device device) {
  return empty({static_cast<int64_t>(nbytes > 0 ? nbytes : 1)}, DType::u8, device);
}

}  // namespace volt::backend
