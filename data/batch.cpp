#include "data/batch.h"

#include "data/pinned_pool.h"
#include "runtime/cuda_api.h"

namespace volt::data {

int64_t Batch::size() const {
  if (!input.defined()) return 0;
  return input.dim() == 0 ? 1 : input.size(0);
}

namespace {
// Host-to-device upload of a pinned batch tensor on the device's copy stream, so it overlaps the step running
// on the compute stream; the compute stream waits for it (an event, no host sync) before any kernel reads it.
Tensor upload_on_copy_stream(const Tensor& host, Device device) {
  Tensor src = host.detach();
  Tensor dst = empty(src.shape(), src.dtype(), device);
  const Stream copy = get_stream(device, StreamKind::Copy);
  // The caching allocator recycles blocks in compute-stream order: `dst` may be a block that kernels already
  // queued on the compute stream still read. The copy stream must not overwrite it before they finish.
  Event reusable;
  reusable.record(get_stream(device, StreamKind::Compute));
  reusable.wait(copy);
  copy_bytes(dst.data_ptr(), device, src.data_ptr(), kCPU, src.nbytes(), &copy);
  Event done;
  done.record(copy);
  done.wait(get_stream(device, StreamKind::Compute));
  // The loader's pooled buffer must not be refilled before the copy has read it.
  PinnedPool::global().record_async_use(host, copy);
  return dst;
}
}  // namespace

Batch Batch::to(Device device, bool non_blocking) const {
  Batch out;
  for (auto [from, to] : {std::pair{&input, &out.input}, std::pair{&target, &out.target}}) {
    if (!from->defined()) continue;
    const bool async_upload = non_blocking && device.is_cuda() && !from->is_cuda() && from->storage()->pinned &&
                              from->is_contiguous();
    *to = async_upload ? upload_on_copy_stream(*from, device) : from->to(device, non_blocking);
  }
  return out;
}

}  // namespace volt::data
