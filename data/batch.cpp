#include <volt/data/batch.h>

#include <volt/data/pinned_pool.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/storage.h>

namespace volt::data {

int64_t Batch::size() const {
  if (!input.defined()) return 0;
  return input.dim() == 0 ? 1 : input.size(0);
}

namespace {
[[noreturn]] void missing_field(const std::map<std::string, Tensor>& fields, const std::string& name) {
  std::string present;
  for (const auto& [k, v] : fields) present += (present.empty() ? "\"" : ", \"") + k + "\"";
  VOLT_FAIL("Batch::field: no field \"", name, "\"; the batch has ",
            present.empty() ? std::string("no fields") : "fields " + present);
}
}  // namespace

const Tensor& Batch::field(const std::string& name) const {
  auto it = fields.find(name);
  if (it == fields.end()) missing_field(fields, name);
  return it->second;
}

Tensor& Batch::field(const std::string& name) {
  auto it = fields.find(name);
  if (it == fields.end()) missing_field(fields, name);
  return it->second;
}

size_t Batch::nbytes() const {
  size_t n = (input.defined() ? input.nbytes() : 0) + (target.defined() ? target.nbytes() : 0);
  for (const auto& [k, t] : fields) n += t.defined() ? t.nbytes() : 0;
  return n;
}

namespace {
// Host-to-device upload of a pinned batch tensor on the device's copy stream, overlapping the step that runs on
// the compute stream. Stream ordering (Batch::upload_ahead defers step 2 to wait_for_upload):
//   1. `dst` comes from the allocator's side pool (allocate_for_writer), never from blocks that compute kernels
//      already queued may still use, so the copy does not wait for the compute stream's earlier work. A recycled
//      side block makes the copy stream wait only for its own last reader (the compute work queued when its
//      previous tensor died, typically a batch two steps back).
//   2. The copy is queued on the copy stream, then `done` is recorded there and the compute stream waits for it
//      (no host sync): every kernel queued later, the first to read the batch included, runs after the copy.
//   3. The pinned host block goes back to the loader's pool with the copy stream's event: the pool waits for it
//      before refilling the block (PinnedPool::record_async_use).
//   4. When `dst` dies, an event on the compute stream marks its last reader (see 1).
Tensor upload_on_copy_stream(const Tensor& host, Device device) {
  Tensor src = host.detach();
  const Stream copy = get_stream(device, StreamKind::Copy);
  auto storage = std::make_shared<Storage>();
  storage->nbytes = src.nbytes();
  storage->device = device;
  storage->data = allocate_for_writer(device, storage->nbytes, copy);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = src.shape();
  impl->strides = contiguous_strides(src.shape());
  impl->dtype = src.dtype();
  Tensor dst(std::move(impl));
  copy_bytes(dst.data_ptr(), device, src.data_ptr(), kCPU, src.nbytes(), &copy);
  // A pool block waits for the copy before it is handed out again; any other pinned block stays alive until the
  // copy has read it.
  if (!PinnedPool::global().record_async_use(host, copy)) keep_alive_until_done(host.storage(), copy);
  return dst;
}

// `b` with move(t) applied to its input, target and every field (undefined tensors stay undefined).
template <class Move>
Batch map_tensors(const Batch& b, Move move) {
  auto each = [&](const Tensor& t) { return t.defined() ? move(t) : t; };
  Batch out;
  out.input = each(b.input);
  out.target = each(b.target);
  for (const auto& [name, t] : b.fields) out.fields.emplace(name, each(t));
  return out;
}
}  // namespace

struct Batch::PendingUpload {
  Event done;  // recorded on the copy stream after the batch's last upload
  Device device;
};

Batch Batch::upload_ahead(Device device) const {
  bool uploaded = false;
  Batch out = map_tensors(*this, [&](const Tensor& from) {
    const bool async_upload =
        device.is_cuda() && !from.is_cuda() && from.storage()->pinned && from.is_contiguous();
    uploaded = uploaded || async_upload;
    return async_upload ? upload_on_copy_stream(from, device) : from.to(device, /*non_blocking=*/true);
  });
  if (uploaded) {  // one event covers every copy: they are queued in order on the one copy stream
    out.pending_upload = std::make_shared<PendingUpload>();
    out.pending_upload->device = device;
    out.pending_upload->done.record(get_stream(device, StreamKind::Copy));
  }
  return out;
}

void Batch::wait_for_upload() {
  if (!pending_upload) return;
  pending_upload->done.wait(get_stream(pending_upload->device, StreamKind::Compute));
  pending_upload.reset();
}

Batch Batch::to(Device device, bool non_blocking) const {
  if (!non_blocking) return map_tensors(*this, [&](const Tensor& from) { return from.to(device); });
  Batch out = upload_ahead(device);
  out.wait_for_upload();
  return out;
}

}  // namespace volt::data
