#pragma once
// CUDA elementwise loops, grid-stride. The host plan (kernels/common/elementwise_plan.h) picks one of three kernels:
// the vector path (16-byte loads/stores of contiguous, aligned operands plus a scalar tail), the linear path (one
// collapsed dim, offset = i * step) and the strided path (div/mod per collapsed dim). The per-element math is the
// same functor the CPU loop calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include <volt/kernels/common/elementwise_plan.h>
#include <volt/kernels/cuda/launch_stream.h>
#include <volt/kernels/tensor.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>

namespace volt::cuda {

using elementwise_plan::Geometry;

inline unsigned blocks_for(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

namespace loops_detail {

template <int N>
struct Steps {
  int64_t s[N];  // element step per linear index (0: broadcast)
};

// vec elements of T as one aligned access (16 bytes for the widest operand, fewer for narrower ones).
template <int VEC, class T>
struct alignas(VEC * sizeof(T)) Pack {
  T v[VEC];
};

template <int VEC, class T>
__device__ __forceinline__ Pack<VEC, T> load_pack(const T* p, int64_t v, int64_t step) {
  if (step == 0) {  // broadcast scalar: uniform across the grid, so no divergence
    Pack<VEC, T> r;
    const T x = *p;
#pragma unroll
    for (int j = 0; j < VEC; ++j) r.v[j] = x;
    return r;
  }
  return reinterpret_cast<const Pack<VEC, T>*>(p)[v];
}

template <int VEC, class Out, class F, class... In>
__device__ __forceinline__ Pack<VEC, Out> apply_pack(const F& f, const Pack<VEC, In>&... x) {
  Pack<VEC, Out> r;
#pragma unroll
  for (int j = 0; j < VEC; ++j) r.v[j] = f(x.v[j]...);
  return r;
}

template <int VEC, class Out, class F, class... In, size_t... K>
__device__ __forceinline__ void vector_step(const Steps<sizeof...(In) + 1>& s, int64_t v, const F& f, Out* out,
                                            std::index_sequence<K...>, const In*... in) {
  reinterpret_cast<Pack<VEC, Out>*>(out)[v] = apply_pack<VEC, Out>(f, load_pack<VEC>(in, v, s.s[K + 1])...);
}

template <class Out, class F, class... In, size_t... K>
__device__ __forceinline__ void linear_step(const Steps<sizeof...(In) + 1>& s, int64_t i, const F& f, Out* out,
                                            std::index_sequence<K...>, const In*... in) {
  out[i * s.s[0]] = f(in[i * s.s[K + 1]]...);
}

template <class Out, class F, class... In, size_t... K>
__device__ __forceinline__ void strided_step(const Geometry<sizeof...(In) + 1>& g, int64_t i, const F& f, Out* out,
                                             std::index_sequence<K...>, const In*... in) {
  int64_t off[sizeof...(In) + 1];
  elementwise_plan::offsets(g, i, off);
  out[off[0]] = f(in[off[K + 1]]...);
}

__device__ __forceinline__ int64_t thread_index() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace loops_detail

// out[i] = f(in...[i]) over n elements of unit-stride (or broadcast) operands: whole Packs, then the scalar tail.
template <int VEC, class Out, class F, class... In>
__global__ void map_vector_kernel(loops_detail::Steps<sizeof...(In) + 1> s, int64_t n, F f, Out* out,
                                  const In*... in) {
  using namespace loops_detail;
  const int64_t nvec = elementwise_plan::vector_count(n, VEC);
  for (int64_t v = thread_index(); v < nvec; v += grid_threads())
    vector_step<VEC>(s, v, f, out, std::index_sequence_for<In...>{}, in...);
  for (int64_t i = elementwise_plan::tail_begin(n, VEC) + thread_index(); i < n; i += grid_threads())
    linear_step(s, i, f, out, std::index_sequence_for<In...>{}, in...);
}

template <class Out, class F, class... In>
__global__ void map_linear_kernel(loops_detail::Steps<sizeof...(In) + 1> s, int64_t n, F f, Out* out,
                                  const In*... in) {
  using namespace loops_detail;
  for (int64_t i = thread_index(); i < n; i += grid_threads())
    linear_step(s, i, f, out, std::index_sequence_for<In...>{}, in...);
}

template <class Out, class F, class... In>
__global__ void map_strided_kernel(Geometry<sizeof...(In) + 1> g, int64_t n, F f, Out* out, const In*... in) {
  using namespace loops_detail;
  for (int64_t i = thread_index(); i < n; i += grid_threads())
    strided_step(g, i, f, out, std::index_sequence_for<In...>{}, in...);
}

// Plans and launches out = f(ins...) on the call's stream (launch_stream()); `ins` are the input tensors of the
// pointers `in`.
template <class Out, class F, class... In>
void launch_map(const Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, F f, const In*... in) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  std::array<const Shape*, N> strides{&out.strides()};
  std::array<std::uintptr_t, N> addrs{reinterpret_cast<std::uintptr_t>(out.data_ptr())};
  for (int k = 1; k < N; ++k) {
    strides[k] = &ins[k - 1]->strides();
    addrs[k] = reinterpret_cast<std::uintptr_t>(ins[k - 1]->data_ptr());
  }
  const auto plan = elementwise_plan::make_plan<N>(out.shape(), strides, addrs, {sizeof(Out), sizeof(In)...});
  constexpr int kVec = elementwise_plan::vector_elems(std::max({sizeof(Out), sizeof(In)...}));
  Out* o = static_cast<Out*>(out.data_ptr());
  cudaStream_t stream = launch_stream();
  loops_detail::Steps<N> s;
  for (int k = 0; k < N; ++k) s.s[k] = plan.steps[k];
  switch (plan.path) {
    case elementwise_plan::Path::Vector:
      if constexpr (kVec > 1) {
        VOLT_ASSERT(plan.vec == kVec, "CUDA elementwise: host plan vector width ", plan.vec, " != kernel's ", kVec);
        map_vector_kernel<kVec><<<blocks_for(elementwise_plan::vector_count(n, kVec)), 256, 0, stream>>>(s, n, f, o,
                                                                                                         in...);
        break;
      }
      [[fallthrough]];
    case elementwise_plan::Path::Linear:
      map_linear_kernel<<<blocks_for(n), 256, 0, stream>>>(s, n, f, o, in...);
      break;
    case elementwise_plan::Path::Strided:
      map_strided_kernel<<<blocks_for(n), 256, 0, stream>>>(plan.geom, n, f, o, in...);
      break;
  }
  VOLT_CUDA_CHECK_LAUNCH();
}

template <class Out, class In, class F>
void map1(const Tensor& out, const Tensor& in, F f) {
  launch_map<Out>(out, {&in}, f, static_cast<const In*>(in.data_ptr()));
}

template <class Out, class A, class B, class F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  launch_map<Out>(out, {&a, &b}, f, static_cast<const A*>(a.data_ptr()), static_cast<const B*>(b.data_ptr()));
}

template <class Out, class A, class B, class C, class F>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  launch_map<Out>(out, {&a, &b, &c}, f, static_cast<const A*>(a.data_ptr()), static_cast<const B*>(b.data_ptr()),
                  static_cast<const C*>(c.data_ptr()));
}

}  // namespace volt::cuda
