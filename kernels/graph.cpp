// volt::Graph (kernels/graph.h): CUDA graphs through runtime/cuda_graph.h, and on the CPU a recording of every
// backend kernel call (the recording backend below, which the registry hands out while a CPU capture is open).
#include <volt/kernels/graph.h>

#include <cstring>
#include <tuple>
#include <utility>

#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/batch_norm.h>
#include <volt/kernels/backend/conv.h>
#include <volt/kernels/backend/dropout.h>
#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/factory.h>
#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/loss.h>
#include <volt/kernels/backend/norm.h>
#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/pool.h>
#include <volt/kernels/backend/recording.h>
#include <volt/kernels/backend/reduce.h>
#include <volt/kernels/backend/softmax.h>
#include <volt/kernels/backend/tensor_ops.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_graph.h>
#include <volt/runtime/error.h>

namespace volt {

namespace {
constexpr size_t kDynamicBytes = 64 * 1024;
}  // namespace

struct Graph::Impl {
  enum class State { empty, capturing, captured } state = State::empty;
  std::vector<std::function<void()>> work;  // CPU: the recorded kernel calls
  uint64_t pool = 0;                        // CUDA: the private pool and the instantiated graph
  std::shared_ptr<cuda_graph::Exec> exec;
  bool pool_open = false;
  // Dynamic blocks: `slots` on the device; CUDA refreshes `staging` and copies it over before each launch, the
  // CPU refreshes `slots` in place.
  Tensor slots;
  std::vector<uint8_t> staging;
  size_t used = 0;
  struct Block {
    size_t offset, nbytes;
    std::function<void(void*)> refresh;
    std::function<bool()> valid;
  };
  std::vector<Block> blocks;
  struct Draw {
    Generator* gen;
    std::shared_ptr<uint64_t> total;  // counters the capture drew from gen
    const uint64_t* base;
  };
  std::vector<Draw> draws;
  std::vector<Tensor> kept;

  // Back to empty after a failed or abandoned capture (a new capture may follow).
  void clear() {
    state = State::empty;
    work.clear();
    blocks.clear();
    draws.clear();
    kept.clear();
    used = 0;
    exec.reset();
  }
};

namespace {

thread_local Graph* t_graph = nullptr;
thread_local Graph::Impl* t_impl = nullptr;

// ---- the recording CPU backend --------------------------------------------------------------------------------

template <class M>
struct kernel_signature;
template <class F, class Sig>
struct kernel_signature<backend::Kernel<Sig> F::*> {
  using type = Sig;
};

void record_cpu(std::function<void()> work) {
  VOLT_CHECK(t_impl != nullptr, "Graph: a CPU kernel was recorded with no capture open");
  t_impl->work.push_back(std::move(work));
}

// Kernel K's recording stand-in: keeps copies of the arguments (tensors share their storage, so the memory stays
// alive with the graph) and calls the real CPU kernel with them at each replay.
template <auto K, class Sig>
struct Recorder;
template <auto K, class... Args>
struct Recorder<K, void(Args...)> {
  static void fn(Args... args) {
    auto real = (backend::family<backend::family_of<K>>(backend::detail::cpu_backend()).*K).fn;
    record_cpu([real, ... a = std::decay_t<Args>(args)]() { real(a...); });
  }
};

template <class F>
F recording_table() {
  const F& cpu = backend::family<F>(backend::detail::cpu_backend());
  F out{};
  constexpr auto& named = backend::Family<F>::kernels;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr auto K = std::get<I>(named).member;
          using Sig = typename kernel_signature<std::remove_cv_t<decltype(K)>>::type;
          if ((cpu.*K).fn != nullptr) out.*K = {&Recorder<K, Sig>::fn, (cpu.*K).dtypes};
        }(),
        ...);
  }(std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<decltype(named)>>>{});
  return out;
}

// One recording table per family of the backend interface, and the Backend over them.
template <class Tables>
struct RecordingBackend;
template <class... F>
struct RecordingBackend<std::tuple<const F*...>> {
  std::tuple<F...> tables{recording_table<F>()...};
  backend::Backend backend{"cpu", backend::FamilyTables{&std::get<F>(tables)...}};
};

const backend::Backend& recording_backend() {
  static const RecordingBackend<backend::FamilyTables> r;
  return r.backend;
}

}  // namespace

namespace backend::detail {
const Backend* cpu_recording_backend() {
  if (t_graph == nullptr || !t_graph->device().is_cpu()) return nullptr;
  return &recording_backend();
}
}  // namespace backend::detail

// ---- Graph ----------------------------------------------------------------------------------------------------

Graph::Graph(Device device) : device_(device), impl_(std::make_unique<Impl>()) {
  check_device_usable(device, "Graph");
}

Graph::~Graph() {
  if (t_graph == this) capture_abort();
  impl_->exec.reset();
  if (impl_->pool_open) cuda_graph::release_pool(device_, impl_->pool);
}

bool Graph::captured() const { return impl_->state == Impl::State::captured; }

size_t Graph::num_nodes() const {
  if (!captured()) return 0;
  return device_.is_cpu() ? impl_->work.size() : cuda_graph::num_nodes(*impl_->exec);
}

void Graph::capture_begin() {
  VOLT_CHECK(impl_->state == Impl::State::empty, "Graph::capture_begin: this graph was ",
             captured() ? "captured already" : "is capturing already", "; make a new Graph to capture again");
  VOLT_CHECK(t_graph == nullptr, "Graph::capture_begin: this thread is capturing a graph of ",
             t_graph->device().str(), " already; one capture per thread at a time");
  // The dynamic blocks' memory comes from the general pool, before the capture.
  impl_->slots = empty({static_cast<int64_t>(kDynamicBytes)}, DType::u8, device_);
  if (device_.is_cuda()) {
    impl_->staging.assign(kDynamicBytes, 0);
    impl_->pool = cuda_graph::begin_capture(device_);
    impl_->pool_open = true;
  } else {
    std::memset(impl_->slots.data_ptr(), 0, kDynamicBytes);
  }
  impl_->state = Impl::State::capturing;
  t_graph = this;
  t_impl = impl_.get();
}

void Graph::capture_end() {
  VOLT_CHECK(t_graph == this, "Graph::capture_end: this graph is not capturing on this thread");
  t_graph = nullptr;
  t_impl = nullptr;
  if (device_.is_cuda()) {
    try {
      impl_->exec = cuda_graph::end_capture(device_, impl_->pool);
    } catch (...) {
      impl_->pool_open = false;  // end_capture released it
      impl_->clear();
      throw;
    }
  }
  impl_->state = Impl::State::captured;
}

void Graph::capture_abort() noexcept {
  if (t_graph != this) return;
  t_graph = nullptr;
  t_impl = nullptr;
  if (device_.is_cuda() && impl_->pool_open) {
    cuda_graph::abort_capture(device_, impl_->pool);
    impl_->pool_open = false;
  }
  impl_->clear();
}

bool Graph::replay() {
  VOLT_CHECK(captured(), "Graph::replay: nothing captured (call capture_begin/capture_end first)");
  VOLT_CHECK(t_graph == nullptr, "Graph::replay: this thread is capturing a graph; replays cannot be captured");
  Impl& im = *impl_;
  for (const Impl::Block& b : im.blocks)
    if (b.valid && !b.valid()) return false;
  uint8_t* host = device_.is_cuda() ? im.staging.data() : static_cast<uint8_t*>(im.slots.data_ptr());
  for (const Impl::Block& b : im.blocks) b.refresh(host + b.offset);
  if (device_.is_cuda()) {
    if (im.used > 0) cuda_graph::copy_to_device_async(im.slots.data_ptr(), host, im.used, device_);
    cuda_graph::launch(*im.exec, device_);
  } else {
    for (const auto& w : im.work) w();
  }
  ++replays_;
  return true;
}

void Graph::keep(const Tensor& t) {
  VOLT_CHECK(!t.defined() || t.device() == device_, "Graph::keep: the tensor is on ", t.device().str(),
             " but the graph records ", device_.str());
  if (t.defined()) impl_->kept.push_back(t);
}

void* Graph::dynamic(size_t nbytes, std::function<void(void*)> refresh, std::function<bool()> valid) {
  VOLT_CHECK(t_graph == this, "Graph::dynamic: only while this graph captures");
  VOLT_CHECK(refresh != nullptr, "Graph::dynamic: a refresh function is required");
  Impl& im = *impl_;
  const size_t off = (im.used + 7) / 8 * 8;
  VOLT_CHECK(off + nbytes <= kDynamicBytes, "Graph::dynamic: the graph's dynamic blocks would take ", off + nbytes,
             " bytes; at most ", kDynamicBytes, " are available");
  im.used = off + nbytes;
  im.blocks.push_back({off, nbytes, std::move(refresh), std::move(valid)});
  return static_cast<uint8_t*>(im.slots.data_ptr()) + off;
}

std::pair<uint64_t, const uint64_t*> Graph::philox(Generator& gen, uint64_t counters) {
  VOLT_CHECK(t_graph == this, "Graph::philox: only while this graph captures");
  Impl& im = *impl_;
  Impl::Draw* d = nullptr;
  for (auto& x : im.draws)
    if (x.gen == &gen) d = &x;
  if (d == nullptr) {
    auto total = std::make_shared<uint64_t>(0);
    // Each replay draws the generator's next `total` counters, as the eager code would.
    void* base = dynamic(2 * sizeof(uint64_t), [g = &gen, total](void* host) {
      uint64_t* q = static_cast<uint64_t*>(host);
      q[0] = g->seed();
      q[1] = g->reserve(*total);
    });
    im.draws.push_back({&gen, total, static_cast<const uint64_t*>(base)});
    d = &im.draws.back();
  }
  const uint64_t first = *d->total;
  *d->total += counters;
  return {first, d->base};
}

uint64_t Graph::draw_position(const Generator& gen) const {
  VOLT_CHECK(t_graph == this, "Graph::draw_position: only while this graph captures");
  for (const auto& d : impl_->draws)
    if (d.gen == &gen) return *d.total;
  return 0;
}

void Graph::set_draw_position(Generator& gen, uint64_t position) {
  VOLT_CHECK(t_graph == this, "Graph::set_draw_position: only while this graph captures");
  for (auto& d : impl_->draws)
    if (d.gen == &gen) {
      *d.total = position;
      return;
    }
  VOLT_CHECK(position == 0, "Graph::set_draw_position: the capture has drawn nothing from this generator");
}

Graph* Graph::capturing(Device device) {
  return t_graph != nullptr && t_graph->device_ == device ? t_graph : nullptr;
}

void Graph::check_not_capturing(Device device, std::string_view what) {
  VOLT_CHECK(capturing(device) == nullptr, what, " while a Graph captures ", device.str(),
             "'s work: captured work has not run yet, so there is nothing to read (read outputs after replay(), "
             "or keep this code out of the captured region)");
}

}  // namespace volt
