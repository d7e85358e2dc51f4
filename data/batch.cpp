#include "data/batch.h"

#include "data/pinned_pool.h"
#include "runtime/cuda_api.h"

namespace volt::data {

int64_t Batch::size() const {
  if (!input.defined()) return 0;
  return input.dim() == 0 ? 1 : input.size(0);
}

Batch Batch::to(Device device, bool non_blocking) const {
  Batch out;
  if (input.defined()) out.input = input.to(device, non_blocking);
  if (target.defined()) out.target = target.to(device, non_blocking);
  if (non_blocking && device.is_cuda()) {
    // Tensor::to queues asynchronous uploads from pinned memory on the device's compute stream: keep the
    // loader's pooled buffers from being refilled before those copies have read them.
    const Stream s = get_stream(device, StreamKind::Compute);
    for (const Tensor* t : {&input, &target})
      if (t->defined() && !t->is_cuda() && t->storage()->pinned) PinnedPool::global().record_async_use(*t, s);
  }
  return out;
}

}  // namespace volt::data
