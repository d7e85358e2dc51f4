#include <volt/runtime/index_check.h>

#include <array>
#include <mutex>

#include <volt/config.h>
#include <volt/runtime/error.h>

#if VOLT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace volt::detail {

std::string index_check_message(IndexCheckSite site, int64_t position, int64_t value, int64_t limit) {
  std::string what;
  switch (site) {
    case IndexCheckSite::embedding:
      what = "embedding: indices value ";
      break;
    default:
      what = "an index check failed: value ";
  }
  return what + std::to_string(value) + " at position " + std::to_string(position) + " is out of range for " +
         (site == IndexCheckSite::embedding ? "an embedding table (num_embeddings)" : "a dimension") + " of size " +
         std::to_string(limit) + " (expected 0 <= index < " + std::to_string(limit) + ")";
}

#if VOLT_WITH_CUDA

namespace {
constexpr int kMaxDevices = 64;
struct Records {
  std::mutex mu;
  std::array<IndexCheckRecord*, kMaxDevices> host{};    // as the host reads it
  std::array<IndexCheckRecord*, kMaxDevices> device{};  // as kernels write it
  std::array<bool, kMaxDevices> tried{};
};
Records& records() {
  static auto* r = new Records;  // never destroyed: kernels may still be queued at exit
  return *r;
}
}  // namespace

IndexCheckRecord* index_check_record(int device_index) {
  if (device_index < 0 || device_index >= kMaxDevices) return nullptr;
  Records& r = records();
  std::lock_guard<std::mutex> l(r.mu);
  if (!r.tried[device_index]) {
    r.tried[device_index] = true;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device_index);
    void* h = nullptr;
    void* d = nullptr;
    if (cudaHostAlloc(&h, sizeof(IndexCheckRecord), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess &&
        cudaHostGetDevicePointer(&d, h, 0) == cudaSuccess) {
      *static_cast<IndexCheckRecord*>(h) = IndexCheckRecord{};
      r.host[device_index] = static_cast<IndexCheckRecord*>(h);
      r.device[device_index] = static_cast<IndexCheckRecord*>(d);
    } else {
      cudaGetLastError();
      if (h) cudaFreeHost(h);
    }
    cudaSetDevice(prev);
  }
  return r.device[device_index];
}

void raise_index_checks(int device_index) {
  if (device_index < 0 || device_index >= kMaxDevices) return;
  Records& r = records();
  IndexCheckRecord rec{};
  {
    std::lock_guard<std::mutex> l(r.mu);
    volatile IndexCheckRecord* h = r.host[device_index];
    if (h == nullptr || h->site == 0) return;
    rec.site = h->site;
    rec.position = h->position;
    rec.value = h->value;
    rec.limit = h->limit;
    h->site = 0;  // reported once; the next failure is recorded afresh
  }
  VOLT_FAIL(index_check_message(static_cast<IndexCheckSite>(rec.site), rec.position, rec.value, rec.limit),
            " (found by a kernel on cuda:", device_index, ", reported at the device's next synchronisation)");
}

#else

IndexCheckRecord* index_check_record(int) { return nullptr; }
void raise_index_checks(int) {}

#endif

}  // namespace volt::detail
