#pragma once
/// @file
/// Routing a region of ops to another CUDA stream. By default every kernel of a GPU runs on that device's compute
/// stream (runtime/cuda_api.h). Inside a StreamScope, the kernels this thread's ops launch on the scope's device
/// (elementwise loops, reductions, cuBLAS and cuDNN calls, ...) are queued on the scope's stream instead.
///
/// Ordering: the scope changes where kernels run, not the program order. Before each kernel call the scope's
/// stream waits for the work queued so far on the compute stream, and after it the compute stream waits for the
/// scope's stream (events, no host synchronisation). That keeps everything that stays on the compute stream
/// correct inside the scope: the memset behind zeros(), copies between devices and to the host, and the caching
/// allocator, which recycles freed blocks in compute-stream order. So results equal those of the same ops outside
/// a scope, and a region gains no overlap with this thread's compute-stream work yet (that would need stream-aware
/// allocation and runtime copies on the scope's stream). Under a CUDA graph capture of the compute stream, the
/// same events fork the scope's stream into the capture and join it back, so the region is captured with the step.
///
/// Scopes belong to the thread that made them, nest (the innermost scope for a device wins), and may be opened
/// for several devices at once. A scope over a CPU stream changes nothing, so device-generic code may open one.
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/device.h>

namespace volt {

/// RAII: while alive, this thread's kernels on `stream.device` are queued on `stream` (ordered with the compute
/// stream as the file comment says). Throws volt::Error when `stream.device` is a GPU that is not usable.
class StreamScope {
 public:
  explicit StreamScope(const Stream& stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  struct Entry;            // this thread's override (kernels/backend/execution_context.h)
  Entry* entry_ = nullptr;  // nullptr for a CPU stream
};

/// The stream this thread's kernels on `device` are queued on now: the innermost StreamScope's for that device,
/// else the device's compute stream; the CPU stream for the CPU.
Stream current_stream(Device device);

}  // namespace volt
