#include <volt/data/batch.h>

#include <volt/data/pinned_pool.h>
#include <volt/runtime/cuda_api.h>

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
  auto move = [&](const Tensor& from) {
    if (!from.defined()) return from;
    const bool async_upload = non_blocking && device.is_cuda() && !from.is_cuda() && from.storage()->pinned &&
                              from.is_contiguous();
    return async_upload ? upload_on_copy_stream(from, device) : from.to(device, non_blocking);
  };
  Batch out;
  out.input = move(input);
  out.target = move(target);
  for (const auto& [name, t] : fields) out.fields.emplace(name, move(t));
  return out;
}

}  // namespace volt::data
