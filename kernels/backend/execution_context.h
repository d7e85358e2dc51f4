#pragma once
// Where a backend call's work runs: its device and the stream its kernels are queued on. backend::call
// (registry.h) resolves it once per call and publishes it for the call's duration (CallContext); the CUDA
// launchers read it (cuda::launch_stream(), kernels/cuda/launch_stream.h) instead of looking a stream up
// themselves, so routing work to another stream (StreamScope, kernels/stream_scope.h) needs no launcher edits.
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/device.h>

namespace volt::backend {

struct ExecutionContext {
  Device device = kCPU;
  void* stream = nullptr;    // the cudaStream_t the call's kernels are queued on; nullptr on the CPU
  bool side_stream = false;  // a StreamScope's stream, not the device's compute stream
};

// The context of a call on `device` from this thread: the innermost stream override for the device, else its
// compute stream ({kCPU, nullptr} for the CPU). Throws volt::Error for a GPU that is not usable and has no
// override.
ExecutionContext resolve_context(Device device);

// The context of the backend call running on this thread (the innermost one when calls nest). A launcher runs
// only inside backend::call; anywhere else this is an internal error.
const ExecutionContext& current_context();

// RAII, opened by backend::call around a kernel: resolves the context and publishes it to current_context().
// On a side stream it also keeps the program order (kernels/stream_scope.h): the side stream waits for the
// compute stream's queued work before the kernel, and the compute stream for the side stream after it.
class CallContext {
 public:
  explicit CallContext(Device device);
  ~CallContext();
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;
  const ExecutionContext& context() const { return ctx_; }

 private:
  ExecutionContext ctx_;
  const ExecutionContext* prev_;
};

// One entry of this thread's stack of stream overrides: StreamScope (kernels/stream_scope.h) validates the
// stream and pushes one. Pushing does no CUDA work and checks nothing, so the resolution is tested on the CPU with
// a made-up GPU stream. Entries must be destroyed in reverse order, on the thread that made them.
class StreamOverride {
 public:
  explicit StreamOverride(const Stream& stream);
  ~StreamOverride();
  StreamOverride(const StreamOverride&) = delete;
  StreamOverride& operator=(const StreamOverride&) = delete;
  // The innermost override's stream for `device`, or nullptr when there is none.
  static const Stream* find(Device device);

 private:
  Stream stream_;
  const StreamOverride* prev_;
};

}  // namespace volt::backend
