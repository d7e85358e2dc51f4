#include <volt/runtime/cuda_graph.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_internal.h>
#include <volt/runtime/index_check.h>
#include <volt/runtime/error.h>
#include <volt/config.h>

#if VOLT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <volt/runtime/cuda_check.h>
#endif

namespace volt {

#if VOLT_WITH_CUDA

namespace {

// What captured copies read (detail::keep_alive_for_capture), by device and private pool, until release_pool.
struct Kept {
  std::mutex mu;
  std::map<std::pair<int, uint64_t>, std::vector<std::shared_ptr<void>>> by_pool;
};
Kept& kept() {
  static Kept* k = new Kept;  // never destroyed: graphs may be released during exit
  return *k;
}

void drop_kept(int device, uint64_t pool) {
  std::vector<std::shared_ptr<void>> dying;  // destroyed outside the lock (a deleter may call back in)
  std::lock_guard<std::mutex> l(kept().mu);
  auto it = kept().by_pool.find({device, pool});
  if (it == kept().by_pool.end()) return;
  dying.swap(it->second);
  kept().by_pool.erase(it);
}

}  // namespace

void detail::keep_alive_for_capture(int device, std::shared_ptr<void> obj) {
  // Pool 0: a capture Volt did not open; kept for the process rather than freed under a graph.
  const uint64_t pool = cuda_device_allocator(device).active_private_pool();
  std::lock_guard<std::mutex> l(kept().mu);
  kept().by_pool[{device, pool}].push_back(std::move(obj));
}

namespace cuda_graph {

struct Exec {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Device device;
  size_t nodes = 0;
  Exec() = default;
  Exec(const Exec&) = delete;
  Exec& operator=(const Exec&) = delete;
  ~Exec() {
    // A replay still running is not cut short: the driver frees the executable graph when it completes.
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

namespace {

constexpr int kMaxDevices = 64;

// The private pool of the capture open on each device (0: none): end and abort act once per capture.
std::atomic<uint64_t> open_pool[kMaxDevices];

cudaStream_t compute_stream(Device device) {
  return static_cast<cudaStream_t>(get_stream(device, StreamKind::Compute).handle);
}

bool usable_gpu(Device device) {
  return device.is_cuda() && device.index >= 0 && device.index < std::min(cuda_device_count(), kMaxDevices);
}

void check_gpu(Device device, const char* what) {
  check_device_usable(device, what);
  VOLT_CHECK(device.is_cuda(), what, ": ", device.str(), " is not a CUDA device; CUDA graphs capture a GPU's "
             "compute stream");
  VOLT_CHECK(device.index < kMaxDevices, what, ": device index ", device.index, " exceeds Volt's limit of ",
             kMaxDevices, " GPUs");
}

// What most likely broke a capture, for the error message.
const char* likely_cause(cudaError_t e) {
  switch (e) {
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureUnsupported:
      return "an operation that cannot be captured (a host synchronisation, a synchronous copy, an event query, "
             "cudaFree, a copy from pageable host memory, ...) ran on the device during capture; run the step "
             "eagerly to find it, and keep it out of the captured step";
    case cudaErrorStreamCaptureUnjoined:
      return "work forked from the compute stream to another stream during capture was not joined back (the "
             "compute stream must wait for an event recorded on that stream before the capture ends)";
    case cudaErrorStreamCaptureIsolation:
      return "captured work depended on work outside the capture (e.g. waiting for an event recorded outside it)";
    case cudaErrorStreamCaptureImplicit:
      return "the legacy default stream was used during capture; Volt's kernels must run on the compute stream";
    case cudaErrorStreamCaptureWrongThread:
      return "the capture was ended from another thread than the one that began it";
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
      return "another capture was merged into or ended inside this one";
    case cudaErrorCapturedEvent:
      return "an event recorded during the capture was queried or synchronised on";
    default:
      return "the first CUDA call that failed during the capture names the cause";
  }
}

// Returns the pool's blocks and what its copies read. The pool is gone from the allocator first, so a block
// freed meanwhile goes to the general pool.
void release_now(int device, uint64_t pool) {
  detail::cuda_device_allocator(device).release_private_pool(pool);
  drop_kept(device, pool);
}

// Page-locked staging for copy_to_device_async: the caller's buffer may be reused on return, and a copy from
// pageable memory may wait for the stream. A slot is reused once the copy that read it has run (its event).
struct Slot {
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t done = nullptr;
};
struct Staging {
  std::mutex mu;
  std::vector<Slot> slots;
  size_t next = 0;  // round robin: the oldest use when every slot is busy
};
constexpr size_t kMaxSlots = 64;

Staging& staging(int device) {
  static Staging* all = new Staging[kMaxDevices];  // never destroyed: pinned memory lives for the process
  return all[device];
}

bool slot_ready(const Slot& s) { return detail::event_done(s.done); }

Slot& staging_slot(Staging& st, size_t nbytes) {
  const size_t n = st.slots.size();
  size_t pick = n;
  for (size_t i = 0; i < n && pick == n; ++i) {
    const size_t j = (st.next + i) % n;
    if (st.slots[j].capacity >= nbytes && slot_ready(st.slots[j])) pick = j;
  }
  if (pick == n && n < kMaxSlots) {
    Slot s;
    VOLT_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    st.slots.push_back(s);
  } else if (pick == n) {  // every slot busy or too small: wait for the oldest use
    pick = st.next % n;
    VOLT_CUDA_CHECK(cudaEventSynchronize(st.slots[pick].done));
  }
  Slot& s = st.slots[pick];
  st.next = (pick + 1) % st.slots.size();
  if (s.capacity < nbytes) {
    // Its last copy is done (event). pinned_free defers the free while any capture is open (cudaFreeHost
    // synchronises the device).
    if (s.host) detail::pinned_free(s.host);
    s.host = nullptr;
    s.capacity = 0;
    const size_t cap = std::bit_ceil(std::max<size_t>(nbytes, 4096));
    s.host = detail::pinned_alloc(cap);
    VOLT_CHECK(s.host != nullptr, "cuda_graph: could not allocate ", cap, " bytes of pinned staging memory");
    s.capacity = cap;
  }
  return s;
}

}  // namespace

uint64_t begin_capture(Device device) {
  check_gpu(device, "cuda_graph::begin_capture");
  DeviceScope g(device);
  const cudaStream_t s = compute_stream(device);
  VOLT_CHECK(!detail::compute_stream_capturing(device.index), "cuda_graph::begin_capture: the compute stream of ",
             device.str(), " is already capturing a CUDA graph; end that capture first (one capture per device)");
  // Kernels that check their indices record a failure in a per-device record made outside captures
  // (runtime/index_check.h): make it now, or the captured kernels would go without one.
  detail::index_check_record(device.index);
  CachingAllocator& alloc = detail::cuda_device_allocator(device.index);
  const uint64_t pool = alloc.begin_private_pool();
  // Counted open before the capture begins (and closed only after it ended): no pinned free runs meanwhile.
  detail::note_capture(true);
  // Relaxed: the allocator may still cudaMalloc a fresh block while capturing (this thread and others).
  const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    cudaGetLastError();
    detail::note_capture(false);
    release_now(device.index, pool);
    VOLT_FAIL("cuda_graph::begin_capture: cudaStreamBeginCapture on the compute stream of ", device.str(),
              " returned ", cudaGetErrorString(e));
  }
  open_pool[device.index].store(pool);
  return pool;
}

std::shared_ptr<Exec> end_capture(Device device, uint64_t pool) {
  check_gpu(device, "cuda_graph::end_capture");
  uint64_t expected = pool;
  VOLT_CHECK(pool != 0 && open_pool[device.index].compare_exchange_strong(expected, 0),
             "cuda_graph::end_capture: no capture with pool ", pool, " is open on ", device.str(),
             " (open: pool ", expected, "); pass the id begin_capture returned, once");
  DeviceScope g(device);
  CachingAllocator& alloc = detail::cuda_device_allocator(device.index);
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(compute_stream(device), &graph);
  detail::note_capture(false);
  if (alloc.active_private_pool() == pool) alloc.end_private_pool();
  if (e != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    release_now(device.index, pool);  // nothing captured ever ran: no need to wait
    if (e == cudaSuccess) e = cudaErrorStreamCaptureInvalidated;  // no graph: the capture was invalidated
    VOLT_FAIL("cuda_graph::end_capture: the capture on ", device.str(), " failed: cudaStreamEndCapture returned ",
              cudaGetErrorString(e), "; ", likely_cause(e));
  }
  auto x = std::make_shared<Exec>();
  x->graph = graph;
  x->device = device;
  e = cudaGraphGetNodes(graph, nullptr, &x->nodes);
  if (e == cudaSuccess) e = cudaGraphInstantiate(&x->exec, graph, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    x.reset();
    release_now(device.index, pool);
    VOLT_FAIL("cuda_graph::end_capture: instantiating the graph captured on ", device.str(), " failed: ",
              cudaGetErrorString(e));
  }
  return x;
}

void abort_capture(Device device, uint64_t pool) noexcept {
  try {
    if (!usable_gpu(device)) return;
    DeviceScope g(device);
    uint64_t expected = pool;
    if (pool != 0 && open_pool[device.index].compare_exchange_strong(expected, 0)) {
      const cudaStream_t s = compute_stream(device);
      if (detail::compute_stream_capturing(device.index)) {  // active or invalidated: leave capture mode
        cudaGraph_t graph = nullptr;
        cudaStreamEndCapture(s, &graph);
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
      }
      detail::note_capture(false);
    }
    release_now(device.index, pool);
  } catch (...) {
  }
}

void launch(const Exec& exec, Device device) {
  VOLT_CHECK(exec.device == device, "cuda_graph::launch: the graph was captured on ", exec.device.str(),
             " and cannot be launched on ", device.str());
  DeviceScope g(device);
  const cudaError_t e = cudaGraphLaunch(exec.exec, compute_stream(device));
  if (e != cudaSuccess) {
    cudaGetLastError();
    VOLT_FAIL("cuda_graph::launch: cudaGraphLaunch on the compute stream of ", device.str(), " returned ",
              cudaGetErrorString(e));
  }
}

size_t num_nodes(const Exec& exec) { return exec.nodes; }

void copy_to_device_async(void* dst, const void* src, size_t nbytes, Device device) {
  check_gpu(device, "cuda_graph::copy_to_device_async");
  if (nbytes == 0) return;
  VOLT_CHECK(!detail::compute_stream_capturing(device.index), "cuda_graph::copy_to_device_async: the compute "
             "stream of ", device.str(), " is capturing; refresh a graph's arguments before launching it, not "
             "inside the capture");
  DeviceScope g(device);
  const cudaStream_t s = compute_stream(device);
  Staging& st = staging(device.index);
  std::lock_guard<std::mutex> l(st.mu);
  Slot& slot = staging_slot(st, nbytes);
  std::memcpy(slot.host, src, nbytes);
  VOLT_CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, nbytes, cudaMemcpyHostToDevice, s));
  VOLT_CUDA_CHECK(cudaEventRecord(slot.done, s));
}

bool is_capturing(Device device) {
  check_device_usable(device, "cuda_graph::is_capturing");
  return device.is_cuda() && detail::compute_stream_capturing(device.index);
}

void release_pool(Device device, uint64_t pool) noexcept {
  try {
    if (!usable_gpu(device) || pool == 0) return;
    DeviceScope g(device);
    // The graph's last replay must be done before its blocks serve other work. During another capture on the
    // device the stream cannot be waited for; the general pool's users then run after the replay in stream order.
    if (!detail::compute_stream_capturing(device.index) && cudaStreamSynchronize(compute_stream(device)) != cudaSuccess)
      cudaGetLastError();
    release_now(device.index, pool);
  } catch (...) {
  }
}

}  // namespace cuda_graph

#else  // ---- built without CUDA ---------------------------------------------------------------------------

void detail::keep_alive_for_capture(int, std::shared_ptr<void>) {}

namespace cuda_graph {

struct Exec {};

namespace {
[[noreturn]] void no_cuda(const char* what) {
  VOLT_FAIL(what, ": Volt was built without CUDA (VOLT_CUDA=OFF); CUDA graphs need the CUDA backend");
}
}  // namespace

uint64_t begin_capture(Device) { no_cuda("cuda_graph::begin_capture"); }
std::shared_ptr<Exec> end_capture(Device, uint64_t) { no_cuda("cuda_graph::end_capture"); }
void abort_capture(Device, uint64_t) noexcept {}
void launch(const Exec&, Device) { no_cuda("cuda_graph::launch"); }
size_t num_nodes(const Exec&) { no_cuda("cuda_graph::num_nodes"); }
void copy_to_device_async(void*, const void*, size_t, Device) { no_cuda("cuda_graph::copy_to_device_async"); }
bool is_capturing(Device) { no_cuda("cuda_graph::is_capturing"); }
void release_pool(Device, uint64_t) noexcept {}

}  // namespace cuda_graph

#endif

}  // namespace volt
