#include <volt/runtime/index_check.h>

#include <array>
#include <mutex>

#include <volt/config.h>
#include <volt/runtime/cuda_internal.h>
#include <volt/runtime/error.h>

#if VOLT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace volt::detail {

std::string index_check_message(IndexCheck check, int64_t position, int64_t value, int64_t limit) {
  const std::string at = " value " + std::to_string(value) + " at position " + std::to_string(position);
  const std::string n = std::to_string(limit);
  const std::string dim = check.dim >= 0 ? "dim " + std::to_string(check.dim) : std::string("the indexed dimension");
  auto target = [&](const char* op) {
    return std::string(op) + ": target" + at + " is out of range for " + n + " classes (expected 0 <= target < " +
           n + " or ignore_index)";
  };
  auto index = [&](const char* op, const char* arg, const std::string& what) {
    return std::string(op) + ": " + arg + at + " is out of range for " + what + " of size " + n +
           " (expected 0 <= index < " + n + ")";
  };
  switch (check.site) {
    case IndexCheckSite::embedding: return index("embedding", "indices", "an embedding table (num_embeddings)");
    case IndexCheckSite::index_select: return index("index_select", "index", dim);
    case IndexCheckSite::gather: return index("gather", "index", dim);
    case IndexCheckSite::scatter_add: return index("scatter_add", "index", dim);
    case IndexCheckSite::index_add: return index("index_add", "index", dim);
    case IndexCheckSite::one_hot: return index("one_hot", "indices", "num_classes");
    case IndexCheckSite::cross_entropy: return target("cross_entropy");
    case IndexCheckSite::nll_loss: return target("nll_loss");
    case IndexCheckSite::fused_cross_entropy: return target("fused_cross_entropy");
    case IndexCheckSite::linear_cross_entropy: return target("linear_cross_entropy");
    case IndexCheckSite::none: break;
  }
  return index("an index check", "index", dim);
}

#if VOLT_WITH_CUDA

namespace {
constexpr int kMaxDevices = 64;
struct Records {
  std::mutex mu;
  std::array<IndexCheckRecord*, kMaxDevices> device{};  // what kernels write
  std::array<IndexCheckRecord*, kMaxDevices> host{};    // page-locked mirror that fetch_index_checks fills
  std::array<bool, kMaxDevices> fetched{};
  std::array<bool, kMaxDevices> tried{};
};
Records& records() {
  static auto* r = new Records;  // never destroyed: kernels may still be queued at exit
  return *r;
}
cudaStream_t compute_stream(int device_index) {
  return static_cast<cudaStream_t>(get_stream(cuda_device(device_index), StreamKind::Compute).handle);
}
}  // namespace

IndexCheckRecord* index_check_record(int device_index) {
  if (device_index < 0 || device_index >= kMaxDevices) return nullptr;
  Records& r = records();
  std::lock_guard<std::mutex> l(r.mu);
  if (r.device[device_index] != nullptr || r.tried[device_index]) return r.device[device_index];
  // Made outside a capture only: a capture would record its zeroing (and refuse the page-locked allocation) rather
  // than run it. Asked first during one, the kernels go without a record (it is made at the next call outside).
  if (compute_stream_capturing(device_index)) return nullptr;
  DeviceScope scope(cuda_device(device_index));
  void* d = nullptr;
  void* h = nullptr;
  // Zeroed before any kernel can use it, on whichever stream (a StreamScope's side stream may run the first checked
  // kernel, and its wait on the compute stream may have been queued already): zeroed, then waited for, once.
  if (cudaMalloc(&d, sizeof(IndexCheckRecord)) != cudaSuccess ||
      cudaMallocHost(&h, sizeof(IndexCheckRecord)) != cudaSuccess ||
      cudaMemsetAsync(d, 0, sizeof(IndexCheckRecord), compute_stream(device_index)) != cudaSuccess) {
    cudaGetLastError();  // no memory for it: the kernels go without a record from now on
    if (d) cudaFree(d);
    if (h) cudaFreeHost(h);
    r.tried[device_index] = true;
    return nullptr;
  }
  // A failed wait is an earlier kernel's error (the device is unusable): say so rather than go on without a record.
  const cudaError_t waited = cudaStreamSynchronize(compute_stream(device_index));
  if (waited != cudaSuccess) {
    cudaFree(d);
    cudaFreeHost(h);
    VOLT_FAIL("cuda:", device_index, ": the device failed before its index-check record could be made: ",
              cudaGetErrorString(waited));
  }
  *static_cast<IndexCheckRecord*>(h) = IndexCheckRecord{};
  r.device[device_index] = static_cast<IndexCheckRecord*>(d);
  r.host[device_index] = static_cast<IndexCheckRecord*>(h);
  return r.device[device_index];
}

void fetch_index_checks(int device_index, void* stream) {
  if (device_index < 0 || device_index >= kMaxDevices) return;
  Records& r = records();
  std::lock_guard<std::mutex> l(r.mu);
  if (r.device[device_index] == nullptr) return;
  r.fetched[device_index] = cudaMemcpyAsync(r.host[device_index], r.device[device_index], sizeof(IndexCheckRecord),
                                            cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)) == cudaSuccess;
  if (!r.fetched[device_index]) cudaGetLastError();
}

void raise_index_checks(int device_index) {
  if (device_index < 0 || device_index >= kMaxDevices) return;
  Records& r = records();
  IndexCheckRecord rec{};
  {
    std::lock_guard<std::mutex> l(r.mu);
    if (!r.fetched[device_index]) return;
    r.fetched[device_index] = false;
    rec = *r.host[device_index];
    if (rec.site == 0) return;
    // Reported once: the record starts afresh, in the compute stream's order (the kernels queued after this see
    // it zero; everything before the fetch has finished).
    *r.host[device_index] = IndexCheckRecord{};
    DeviceScope scope(cuda_device(device_index));
    if (cudaMemsetAsync(r.device[device_index], 0, sizeof(IndexCheckRecord), compute_stream(device_index)) !=
        cudaSuccess)
      cudaGetLastError();
  }
  const IndexCheck check{static_cast<IndexCheckSite>(rec.site), static_cast<int32_t>(rec.dim)};
  VOLT_FAIL(index_check_message(check, rec.position, rec.value, rec.limit),
            " (found by a kernel on cuda:", device_index, ", reported at the device's next synchronisation)");
}

#else

IndexCheckRecord* index_check_record(int) { return nullptr; }
void fetch_index_checks(int, void*) {}
void raise_index_checks(int) {}

#endif

}  // namespace volt::detail
