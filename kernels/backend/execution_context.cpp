#include <volt/kernels/backend/execution_context.h>

#include <volt/kernels/stream_scope.h>
#include <volt/runtime/error.h>

namespace volt::backend {

namespace {
thread_local const StreamOverride* t_overrides = nullptr;  // innermost first
thread_local const ExecutionContext* t_call = nullptr;     // the running call's context
}  // namespace

StreamOverride::StreamOverride(const Stream& stream) : stream_(stream), prev_(t_overrides) { t_overrides = this; }
StreamOverride::~StreamOverride() { t_overrides = prev_; }

const Stream* StreamOverride::find(Device device) {
  for (const StreamOverride* o = t_overrides; o != nullptr; o = o->prev_)
    if (o->stream_.device == device) return &o->stream_;
  return nullptr;
}

ExecutionContext resolve_context(Device device) {
  if (device.is_cpu()) return ExecutionContext{device, nullptr, false};
  if (const Stream* s = StreamOverride::find(device)) {
    // A scope over the compute stream itself is no side stream (nothing to order).
    const bool side = s->handle != get_stream(device, StreamKind::Compute).handle;
    return ExecutionContext{device, s->handle, side};
  }
  return ExecutionContext{device, get_stream(device, StreamKind::Compute).handle, false};
}

const ExecutionContext& current_context() {
  VOLT_ASSERT(t_call != nullptr, "a backend launcher asked for its execution context outside backend::call");
  return *t_call;
}

CallContext::CallContext(Device device) : ctx_(resolve_context(device)), prev_(t_call) {
  if (ctx_.side_stream) {  // the kernel sees everything queued on the compute stream before it
    Event e;
    e.record(get_stream(device, StreamKind::Compute));
    e.wait(Stream{device, ctx_.stream});
  }
  t_call = &ctx_;
}

CallContext::~CallContext() {
  t_call = prev_;
  if (!ctx_.side_stream) return;
  try {  // later compute-stream work (and the allocator's reuse of the call's freed blocks) waits for the kernel
    Event e;
    e.record(Stream{ctx_.device, ctx_.stream});
    e.wait(get_stream(ctx_.device, StreamKind::Compute));
  } catch (...) {
    // Recording an event failed: the CUDA context is broken, and the next CUDA call reports it.
  }
}

}  // namespace volt::backend

namespace volt {

struct StreamScope::Entry {
  backend::StreamOverride override;
};

StreamScope::StreamScope(const Stream& stream) {
  if (stream.device.is_cpu()) return;
  check_device_usable(stream.device, "StreamScope");
  entry_ = new Entry{backend::StreamOverride(stream)};
}

StreamScope::~StreamScope() { delete entry_; }

Stream current_stream(Device device) {
  const backend::ExecutionContext ctx = backend::resolve_context(device);
  return Stream{device.is_cpu() ? kCPU : device, ctx.stream};
}

}  // namespace volt
