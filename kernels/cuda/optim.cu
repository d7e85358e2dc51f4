// CUDA kernels of the fused optimizer updates: one launch updates a list of parameters (a whole parameter group),
// chunked as kernels/common/multi_tensor.h plans it; the per-element math is kernels/common/optim_math.h, the
// same functions the CPU loop calls.
#include <algorithm>

#include <volt/kernels/backend/optim.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/multi_tensor.h>
#include <volt/kernels/common/optim_dispatch.h>
#include <volt/kernels/common/optim_extra_dispatch.h>
#include <volt/kernels/cuda/loops.cuh>

namespace volt::cuda {

namespace om = optim_math;

namespace {

// Multi-tensor launches: the argument block names up to kMaxTensors tensors and kMaxChunks chunks of `chunk`
// elements, from kMinChunk for small lists up to kMaxChunk (kernels/common/multi_tensor.h chooses and plans
// them); block b updates chunk b. The block stays under the
// 4 KiB kernel-parameter limit for every type combination.
// A tensor of at least kOwnLaunch elements instead gets a launch of its own (chunk 0 in the table): its one tensor,
// in slot 0, spread over a grid that fills the GPU (kBlocksPerSm blocks per multiprocessor), each thread striding
// over the grid. 160 blocks of one chunk each would leave most of an H200 idle (memory-latency bound). Every kernel
// below does the same arithmetic on each element, with the element's index in its tensor, in either layout, so the
// results are the same bit for bit; only the grouping of elements into threads differs.
constexpr int kMaxTensors = 24;
constexpr int kMaxChunks = 160;
constexpr int64_t kMinChunk = 2048, kMaxChunk = 65536;
constexpr int kThreads = 256;
constexpr int64_t kOwnLaunch = int64_t(1) << 20;
constexpr int kBlocksPerSm = 8;  // 8 x 256 threads: a full multiprocessor

struct ChunkTable {
  int tensor[kMaxChunks];
  int64_t begin[kMaxChunks];
  int64_t chunk;  // elements per chunk (the last chunk of a tensor may be shorter); 0: one tensor over the grid
};

// This thread's elements: its tensor's index in the argument block and the indices begin, begin + step, ... below
// end (a chunk: [chunk begin + threadIdx.x, chunk end) by blockDim.x; a launch of its own: the whole tensor by the
// grid's width).
struct ChunkSpan {
  int t;
  int64_t begin, end, step;
};
__device__ ChunkSpan chunk_span(const ChunkTable& c, const int64_t* n) {
  if (c.chunk == 0)
    return {0, int64_t(blockIdx.x) * blockDim.x + threadIdx.x, n[0], int64_t(gridDim.x) * blockDim.x};
  const int t = c.tensor[blockIdx.x];
  const int64_t begin = c.begin[blockIdx.x];
  return {t, begin + threadIdx.x, begin + c.chunk < n[t] ? begin + c.chunk : n[t], int64_t(blockDim.x)};
}

// Blocks for a tensor of n elements with a launch of its own: enough to fill the GPU, no more than its elements need.
unsigned own_launch_blocks(int64_t n) {
  int dev = 0;
  VOLT_CUDA_CHECK(cudaGetDevice(&dev));
  const int sms = cuda_multiprocessor_count(dev);
  const int64_t want = (n + kThreads - 1) / kThreads, cap = int64_t(sms > 0 ? sms : 1) * kBlocksPerSm;
  return static_cast<unsigned>(want < cap ? want : cap);
}

template <class T, class M>
struct AdamArgs {
  T* p[kMaxTensors];
  const T* g[kMaxTensors];
  M* m[kMaxTensors];
  M* v[kMaxTensors];
  M* vmax[kMaxTensors];
  int64_t n[kMaxTensors];
  uint64_t key[kMaxTensors];  // stochastic rounding's per-tensor keys
  ChunkTable chunks;
};

static_assert(sizeof(AdamArgs<double, double>) + sizeof(om::AdamScalars<double>) + sizeof(void*) <= 4096,
              "adam_kernel's parameters exceed the 4 KiB kernel-parameter limit");

template <class T, class M>
struct SgdArgs {
  T* p[kMaxTensors];
  const T* g[kMaxTensors];
  M* buf[kMaxTensors];
  int64_t n[kMaxTensors];
  ChunkTable chunks;
};

template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
__global__ void adam_kernel(AdamArgs<T, M> a, om::AdamScalars<S> s_arg, const om::AdamScalars<S>* dynamic) {
  const om::AdamScalars<S> s = dynamic != nullptr ? *dynamic : s_arg;
  const auto [t, begin, end, step] = chunk_span(a.chunks, a.n);
  T* __restrict__ p = a.p[t];
  const T* __restrict__ g = a.g[t];
  M* __restrict__ m = a.m[t];
  M* __restrict__ v = a.v[t];
  M* __restrict__ vmax = a.vmax[t];
  // Four elements per thread at a time, every load of the four issued before the first update (as
  // for_each_strided does for one array): one element's four or five dependent loads at a time left the
  // update latency-bound (1.13 ms for GPT-2 124M's 124M parameters on an H200, about 65 % of the bandwidth).
  constexpr int kUnroll = 4;
  int64_t i = begin;
  for (; i + (kUnroll - 1) * step < end; i += kUnroll * step) {
    S pp[kUnroll], gg[kUnroll], mm[kUnroll], vv[kUnroll], vm[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * step;
      pp[u] = static_cast<S>(p[j]);
      gg[u] = static_cast<S>(g[j]);
      mm[u] = static_cast<S>(m[j]);
      vv[u] = static_cast<S>(v[j]);
      vm[u] = kAms ? static_cast<S>(vmax[j]) : S(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * step;
      om::adam_update<S, kDecay, kDecoupled, kAms>(pp[u], gg[u], mm[u], vv[u], vm[u], s);
      p[j] = om::store_param<T>(pp[u], s, a.key[t], j);
      m[j] = M(mm[u]);
      v[j] = M(vv[u]);
      if (kAms) vmax[j] = M(vm[u]);
    }
  }
  for (; i < end; i += step) {
    S pp = static_cast<S>(p[i]), mm = static_cast<S>(m[i]), vv = static_cast<S>(v[i]);
    S vm = kAms ? static_cast<S>(vmax[i]) : S(0);
    om::adam_update<S, kDecay, kDecoupled, kAms>(pp, static_cast<S>(g[i]), mm, vv, vm, s);
    p[i] = om::store_param<T>(pp, s, a.key[t], i);
    m[i] = M(mm);
    v[i] = M(vv);
    if (kAms) vmax[i] = M(vm);
  }
}

template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
__global__ void sgd_kernel(SgdArgs<T, M> a, bool first, om::SgdScalars<S> s_arg, const om::SgdScalars<S>* dynamic) {
  const om::SgdScalars<S> s = dynamic != nullptr ? *dynamic : s_arg;
  const auto [t, begin, end, step] = chunk_span(a.chunks, a.n);
  T* __restrict__ p = a.p[t];
  const T* __restrict__ g = a.g[t];
  M* __restrict__ buf = a.buf[t];
  for (int64_t i = begin; i < end; i += step) {
    S pp = static_cast<S>(p[i]);
    S b = kMomentum ? static_cast<S>(buf[i]) : S(0);
    om::sgd_update<S, kDecay, kMomentum, kNesterov>(pp, static_cast<S>(g[i]), b, first, s);
    p[i] = T(pp);
    if (kMomentum) buf[i] = M(b);
  }
}

// RMSprop, Adagrad and Lion: Op (kernels/common/optim_math_extra.h) over (param, grad, Op::kStates states).
template <class T, class M>
struct StateArgs {
  T* p[kMaxTensors];
  const T* g[kMaxTensors];
  M* state[om::kMaxStates][kMaxTensors];
  int64_t n[kMaxTensors];
  ChunkTable chunks;
};

static_assert(sizeof(StateArgs<double, double>) + sizeof(om::LionScalars<double>) <= 4096,
              "state_update_kernel's parameters exceed the 4 KiB kernel-parameter limit");

template <class T, class M, class Op>
__global__ void state_update_kernel(StateArgs<T, M> a, Op op) {
  using S = acc_t<T>;
  const auto [t, begin, end, step] = chunk_span(a.chunks, a.n);
  T* __restrict__ p = a.p[t];
  const T* __restrict__ g = a.g[t];
  for (int64_t i = begin; i < end; i += step) {
    S pp = static_cast<S>(p[i]);
    S st[Op::kStates];
#pragma unroll
    for (int k = 0; k < Op::kStates; ++k) st[k] = static_cast<S>(a.state[k][t][i]);
    op(pp, static_cast<S>(g[i]), st);
    p[i] = T(pp);
#pragma unroll
    for (int k = 0; k < Op::kStates; ++k) a.state[k][t][i] = M(st[k]);
  }
}

// Plans `list` into launches and calls launch(args, blocks) for each, with args' tensor and chunk tables filled
// (fill(args, slot, entry) copies one list entry's pointers into slot `slot`). Each tensor of at least kOwnLaunch
// elements gets a launch of its own over the whole GPU (chunk 0) and the rest are planned as multi-tensor launches.
// own_blocks > 0 fixes an own launch's grid by the tensor's size alone: a block per 16 elements per thread, at most
// own_blocks, so the gradient norm's per-block partials fix its summation order on every GPU, not only on one model.
template <class Args, class Entry, class Fill, class Launch>
void for_each_launch(const std::vector<Entry>& all, Fill&& fill, Launch&& launch, int64_t own_blocks = 0) {
  std::vector<Entry> list;
  list.reserve(all.size());
  for (const Entry& e : all) {
    if (e.n < kOwnLaunch) {
      list.push_back(e);
      continue;
    }
    Args args{};
    args.chunks.chunk = 0;
    fill(args, 0, e);
    args.n[0] = e.n;
    const int64_t want = (e.n + 16 * kThreads - 1) / (16 * kThreads);
    launch(args, own_blocks > 0 ? static_cast<unsigned>(std::min(want, own_blocks)) : own_launch_blocks(e.n));
  }
  if (list.empty()) return;
  std::vector<int64_t> numels;
  numels.reserve(list.size());
  for (const Entry& e : list) numels.push_back(e.n);
  const int64_t chunk = multi_tensor::chunk_for(numels, kMaxChunks, kMinChunk, kMaxChunk);
  for (const multi_tensor::Launch& l : multi_tensor::plan(numels, chunk, kMaxTensors, kMaxChunks)) {
    Args args{};
    args.chunks.chunk = chunk;
    for (size_t k = 0; k < l.tensors.size(); ++k) {
      const Entry& e = list[static_cast<size_t>(l.tensors[k])];
      fill(args, k, e);
      args.n[k] = e.n;
    }
    for (size_t c = 0; c < l.chunks.size(); ++c) {
      args.chunks.tensor[c] = l.chunks[c].tensor;
      args.chunks.begin[c] = l.chunks[c].begin;
    }
    launch(args, static_cast<unsigned>(l.chunks.size()));
  }
}

template <class T>
struct ListArgs {
  T* g[kMaxTensors];
  int64_t n[kMaxTensors];
  ChunkTable chunks;
};

template <class T, class S>
__global__ void unscale_check_kernel(ListArgs<T> a, S inv, float* __restrict__ found) {
  const auto [t, begin, end, step] = chunk_span(a.chunks, a.n);
  T* __restrict__ g = a.g[t];
  bool bad = false;
  for (int64_t i = begin; i < end; i += step) {
    S v = static_cast<S>(g[i]);
    bad |= om::unscale_update(v, inv);
    g[i] = T(v);
  }
  // Every writer stores the same value, so the unsynchronised store is benign; a warp vote keeps it to one
  // store per warp.
  if (__any_sync(__activemask(), bad) && bad) *found = 1.0f;
}

// Calls f(i, d[i]) for i = begin, begin + step, ... below end, in index order, with kUnroll loads in flight at a
// time (a group's loads are all issued before f sees the first of them): a thread walking its elements one
// dependent load at a time is latency-bound. f may write d[i] (scale_by does).
template <int kUnroll, class T, class F>
__device__ void for_each_strided(const T* d, int64_t begin, int64_t end, int64_t step, F&& f) {
  int64_t i = begin;
  for (; i + (kUnroll - 1) * step < end; i += kUnroll * step) {
    T r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = d[i + u * step];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(i + u * step, r[u]);
  }
  for (; i < end; i += step) f(i, d[i]);
}

// Gradient norm: block b reduces its chunk to partials[base + b] (double, in a fixed order: per-thread strided
// sums, then a shared-memory tree), and one block then folds the partials of every launch into out in index
// order, so the result is the same on every run.
template <class T>
__global__ void norm_partial_kernel(ListArgs<T> a, om::NormKind kind, double p, double* __restrict__ partials) {
  __shared__ double red[kThreads];
  const auto [t, begin, end, step] = chunk_span(a.chunks, a.n);
  const T* __restrict__ d = a.g[t];
  double acc = 0.0;
  for_each_strided<4>(d, begin, end, step, [&](int64_t, T x) {
    acc = om::norm_combine(acc, om::norm_term(static_cast<double>(static_cast<acc_t<T>>(x)), kind, p), kind);
  });
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) red[threadIdx.x] = om::norm_combine(red[threadIdx.x], red[threadIdx.x + w], kind);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = red[0];
}

__global__ void norm_fold_kernel(const double* __restrict__ partials, int64_t n, om::NormKind kind,
                                 double* __restrict__ out) {
  __shared__ double red[kThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = om::norm_combine(acc, partials[i], kind);
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) red[threadIdx.x] = om::norm_combine(red[threadIdx.x], red[threadIdx.x + w], kind);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = om::norm_combine(*out, red[0], kind);
}

// d[i] = T(S(d[i]) * c), four elements per thread at a time (their loads issued before their stores). A
// coefficient of exactly 1 leaves every value as it is (x * 1 == x, and T(S(x)) == x), so nothing is read or
// written: the backward of a loss backpropagated as is, or gradient clipping below the threshold, costs a launch.
// coef32, when not null, is used as it is; else *coef64 is rounded to T first (backend/optim.h).
template <class T, class S>
__global__ void scale_by_kernel(ListArgs<T> a, const double* __restrict__ coef64, const float* __restrict__ coef32) {
  const S c = coef32 != nullptr ? static_cast<S>(*coef32) : static_cast<S>(from_f64<T>(*coef64));
  if (c == S(1)) return;
  const auto [t, begin, end, step] = chunk_span(a.chunks, a.n);
  T* d = a.g[t];
  for_each_strided<4>(d, begin, end, step, [&](int64_t i, T x) { d[i] = T(static_cast<S>(x) * c); });
}

struct GpuLauncher {
  cudaStream_t stream;
  template <class T, class M, class S, bool kDecay, bool kDecoupled, bool kAms>
  void adam(const std::vector<om::AdamPointers<T, M>>& list, const om::AdamScalars<S>& s,
            const om::AdamScalars<S>* dynamic) const {
    using Args = AdamArgs<T, M>;
    for_each_launch<Args>(
        list,
        [](Args& a, size_t k, const om::AdamPointers<T, M>& e) {
          a.p[k] = e.p;
          a.g[k] = e.g;
          a.m[k] = e.m;
          a.v[k] = e.v;
          a.vmax[k] = e.vmax;
          a.key[k] = e.key;
        },
        [&](const Args& a, unsigned blocks) {
          adam_kernel<T, M, S, kDecay, kDecoupled, kAms><<<blocks, kThreads, 0, stream>>>(a, s, dynamic);
          VOLT_CUDA_CHECK_LAUNCH();
        });
  }
  template <class T, class M, class S, bool kDecay, bool kMomentum, bool kNesterov>
  void sgd(const std::vector<om::SgdPointers<T, M>>& list, bool first, const om::SgdScalars<S>& s,
           const om::SgdScalars<S>* dynamic) const {
    using Args = SgdArgs<T, M>;
    for_each_launch<Args>(
        list,
        [](Args& a, size_t k, const om::SgdPointers<T, M>& e) {
          a.p[k] = e.p;
          a.g[k] = e.g;
          a.buf[k] = e.buf;
        },
        [&](const Args& a, unsigned blocks) {
          sgd_kernel<T, M, S, kDecay, kMomentum, kNesterov><<<blocks, kThreads, 0, stream>>>(a, first, s, dynamic);
          VOLT_CUDA_CHECK_LAUNCH();
        });
  }
};

struct GpuStateLauncher {
  cudaStream_t stream;
  template <class T, class M, class Op>
  void run(const std::vector<om::StatePointers<T, M>>& list, const Op& op) const {
    using Args = StateArgs<T, M>;
    for_each_launch<Args>(
        list,
        [](Args& a, size_t k, const om::StatePointers<T, M>& e) {
          a.p[k] = e.p;
          a.g[k] = e.g;
          for (int j = 0; j < om::kMaxStates; ++j) a.state[j][k] = e.state[j];
        },
        [&](const Args& a, unsigned blocks) {
          state_update_kernel<T, M, Op><<<blocks, kThreads, 0, stream>>>(a, op);
          VOLT_CUDA_CHECK_LAUNCH();
        });
  }
};

void rmsprop_step(const std::vector<RmspropTensors>& list, const RmspropHyper& h) {
  if (list.empty()) return;
  om::dispatch_rmsprop(GpuStateLauncher{launch_stream()}, list, h);
}
void adagrad_step(const std::vector<AdagradTensors>& list, const AdagradHyper& h) {
  if (list.empty()) return;
  om::dispatch_adagrad(GpuStateLauncher{launch_stream()}, list, h);
}
void lion_step(const std::vector<LionTensors>& list, const LionHyper& h) {
  if (list.empty()) return;
  om::dispatch_lion(GpuStateLauncher{launch_stream()}, list, h);
}

void adam_step(const std::vector<AdamTensors>& list, const AdamHyper& h, const void* dynamic) {
  if (list.empty()) return;
  om::dispatch_adam(GpuLauncher{launch_stream()}, list, h, dynamic);
}

void sgd_step(const std::vector<SgdTensors>& list, const SgdHyper& h, const void* dynamic) {
  if (list.empty()) return;
  om::dispatch_sgd(GpuLauncher{launch_stream()}, list, h, dynamic);
}

struct ListEntry {
  void* g;
  int64_t n;
};

std::vector<ListEntry> entries(const std::vector<Tensor>& list) {
  std::vector<ListEntry> out;
  for (const Tensor& t : list)
    if (t.numel() > 0) out.push_back({t.data_ptr(), t.numel()});
  return out;
}

// Calls launch(T{}, args, blocks) for each launch the plan makes over the non-empty tensors of `list` (all of
// the first one's dtype T): args names each launch's tensors and chunks.
template <class Launch>
void launch_over_list(const std::vector<Tensor>& list, const char* what, Launch&& launch, int64_t own_blocks = 0) {
  const std::vector<ListEntry> e = entries(list);
  if (e.empty()) return;
  dispatch_floating(list.front().dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    using Args = ListArgs<T>;
    for_each_launch<Args>(
        e, [](Args& a, size_t k, const ListEntry& x) { a.g[k] = static_cast<T*>(x.g); },
        [&](const Args& a, unsigned blocks) { launch(tag, a, blocks); }, own_blocks);
  });
}

void unscale_check(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found) {
  if (grads.empty()) return;
  cudaStream_t stream = launch_stream();
  launch_over_list(grads, "unscale_check", [&](auto tag, const auto& a, unsigned blocks) {
    using T = decltype(tag);
    using S = acc_t<T>;
    unscale_check_kernel<T, S><<<blocks, kThreads, 0, stream>>>(a, static_cast<S>(inv_scale),
                                                               static_cast<float*>(found.data_ptr()));
    VOLT_CUDA_CHECK_LAUNCH();
  });
}

// A tensor with a launch of its own reduces over at most this many blocks (fixed by its size, so the partials and
// their order are the same on every GPU): 1024 x 256 threads fill an H200 (132 SMs x 2048 threads) about once.
// The chunked plan alone gave GPT-2 124M's gradients ~1900 chunks in launches of at most 160 blocks, one after
// another, each thread walking 256 elements one load at a time: 0.47-1.36 ms for 0.5 GB (stop 29's profiles).
constexpr int64_t kNormOwnBlocks = 1024;

void norm_partial(const std::vector<Tensor>& list, double p, const Tensor& out) {
  if (entries(list).empty()) return;
  cudaStream_t stream = launch_stream();
  const om::NormKind kind = om::norm_kind(p);
  // One partial per block of every launch: the plan is walked once to count them, then again to launch.
  int64_t total = 0;
  launch_over_list(list, "norm_partial", [&](auto, const auto&, unsigned blocks) { total += blocks; },
                   kNormOwnBlocks);
  Tensor partials = empty({total}, DType::f64, out.device());  // stream-ordered: freed after the fold is queued
  double* base = static_cast<double*>(partials.data_ptr());
  int64_t done = 0;
  launch_over_list(list, "norm_partial", [&](auto tag, const auto& a, unsigned blocks) {
    using T = decltype(tag);
    norm_partial_kernel<T><<<blocks, kThreads, 0, stream>>>(a, kind, p, base + done);
    VOLT_CUDA_CHECK_LAUNCH();
    done += blocks;
  }, kNormOwnBlocks);
  norm_fold_kernel<<<1, kThreads, 0, stream>>>(base, total, kind, static_cast<double*>(out.data_ptr()));
  VOLT_CUDA_CHECK_LAUNCH();
}

void scale_by(const std::vector<Tensor>& list, const Tensor& coef) {
  if (list.empty()) return;
  cudaStream_t stream = launch_stream();
  launch_over_list(list, "scale_by", [&](auto tag, const auto& a, unsigned blocks) {
    using T = decltype(tag);
    const bool f32 = coef.dtype() == DType::f32;
    scale_by_kernel<T, acc_t<T>><<<blocks, kThreads, 0, stream>>>(
        a, f32 ? nullptr : static_cast<const double*>(coef.data_ptr()),
        f32 ? static_cast<const float*>(coef.data_ptr()) : nullptr);
    VOLT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

constexpr backend::OptimKernels optim_kernels{
    .adam_step = {adam_step, backend::kFloating},
    .sgd_step = {sgd_step, backend::kFloating},
    .rmsprop_step = {rmsprop_step, backend::kFloating},
    .adagrad_step = {adagrad_step, backend::kFloating},
    .lion_step = {lion_step, backend::kFloating},
    .unscale_check = {unscale_check, backend::kFloating},
    .norm_partial = {norm_partial, backend::kFloating},
    .scale_by = {scale_by, backend::kFloating},
};

}  // namespace volt::cuda
