#pragma once
// CUDA elementwise loops: one thread per output element, grid-stride. Each operand's element offset comes from
// the linear index through its own strides (broadcast dims have stride 0). The per-element math is the same
// functor the CPU loop calls.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include <volt/runtime/cuda_api.h>
#include <volt/runtime/cuda_check.h>
#include <volt/kernels/tensor.h>

namespace volt::cuda {

constexpr int kMaxDims = 12;

template <int N>
struct Geometry {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];  // in elements
};

template <int N>
Geometry<N> make_geometry(const Shape& shape, const std::array<const Tensor*, N>& ops) {
  VOLT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "CUDA elementwise: at most ", kMaxDims,
             " dimensions are supported, got ", shape.size());
  Geometry<N> g{};
  g.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = shape[d];
    for (int k = 0; k < N; ++k) g.strides[k][d] = ops[k]->strides()[d];
  }
  return g;
}

template <int N>
__device__ __forceinline__ void offsets(const Geometry<N>& g, int64_t linear, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    int64_t i = linear % g.sizes[d];
    linear /= g.sizes[d];
    for (int k = 0; k < N; ++k) off[k] += i * g.strides[k][d];
  }
}

inline cudaStream_t compute_stream(const Tensor& t) {
  return static_cast<cudaStream_t>(get_stream(t.device(), StreamKind::Compute).handle);
}

inline unsigned blocks_for(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

template <class Out, class In, class F>
__global__ void map1_kernel(Geometry<2> g, int64_t n, Out* out, const In* in, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(g, i, off);
    out[off[0]] = f(in[off[1]]);
  }
}

template <class Out, class A, class B, class F>
__global__ void map2_kernel(Geometry<3> g, int64_t n, Out* out, const A* a, const B* b, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets<3>(g, i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <class Out, class A, class B, class C, class F>
__global__ void map3_kernel(Geometry<4> g, int64_t n, Out* out, const A* a, const B* b, const C* c, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[4];
    offsets<4>(g, i, off);
    out[off[0]] = f(a[off[1]], b[off[2]], c[off[3]]);
  }
}

template <class Out, class In, class F>
void map1(const Tensor& out, const Tensor& in, F f) {
  int64_t n = out.numel();
  if (n == 0) return;
  auto g = make_geometry<2>(out.shape(), {&out, &in});
  map1_kernel<<<blocks_for(n), 256, 0, compute_stream(out)>>>(g, n, static_cast<Out*>(out.data_ptr()),
                                                              static_cast<const In*>(in.data_ptr()), f);
  VOLT_CUDA_CHECK_LAUNCH();
}

template <class Out, class A, class B, class F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  int64_t n = out.numel();
  if (n == 0) return;
  auto g = make_geometry<3>(out.shape(), {&out, &a, &b});
  map2_kernel<<<blocks_for(n), 256, 0, compute_stream(out)>>>(g, n, static_cast<Out*>(out.data_ptr()),
                                                              static_cast<const A*>(a.data_ptr()),
                                                              static_cast<const B*>(b.data_ptr()), f);
  VOLT_CUDA_CHECK_LAUNCH();
}

template <class Out, class A, class B, class C, class F>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  int64_t n = out.numel();
  if (n == 0) return;
  auto g = make_geometry<4>(out.shape(), {&out, &a, &b, &c});
  map3_kernel<<<blocks_for(n), 256, 0, compute_stream(out)>>>(
      g, n, static_cast<Out*>(out.data_ptr()), static_cast<const A*>(a.data_ptr()),
      static_cast<const B*>(b.data_ptr()), static_cast<const C*>(c.data_ptr()), f);
  VOLT_CUDA_CHECK_LAUNCH();
}

}  // namespace volt::cuda
