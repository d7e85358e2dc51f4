#pragma once
// CPU elementwise loops over strided operands. Operands are views already broadcast to the output's shape
// (expanded dims have stride 0). The innermost dimension runs as a plain loop, which the compiler vectorises
// when every operand is unit-stride there.
#include <array>
#include <cstdint>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt::cpu {

// Calls body(ptrs, n, inner_strides_in_bytes) over rows of the innermost dimension.
template <size_t N, class Body>
void for_each_row(const Shape& shape, std::array<char*, N> base, std::array<Shape, N> strides_bytes, Body&& body) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  if (nd == 0) {
    std::array<int64_t, N> s{};
    body(base, 1, s);
    return;
  }
  // Collapse to a row loop: inner = last dim.
  const int64_t inner = shape[nd - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides_bytes[k][nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t rows = numel / inner;
  std::array<char*, N> p = base;
  for (int64_t r = 0; r < rows; ++r) {
    body(p, inner, inner_stride);
    // Advance the multi-index over dims [0, nd-1).
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (size_t k = 0; k < N; ++k) p[k] += strides_bytes[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) p[k] -= strides_bytes[k][d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

inline Shape byte_strides(const Tensor& t) {
  Shape s = t.strides();
  for (auto& v : s) v *= static_cast<int64_t>(itemsize(t.dtype()));
  return s;
}

// out[i] = f(in[i]) with out and in of the same shape (in may be strided or broadcast).
template <class Out, class In, class F>
void map1(const Tensor& out, const Tensor& in, F f) {
  if (out.is_contiguous() && in.is_contiguous()) {
    Out* o = static_cast<Out*>(out.data_ptr());
    const In* a = static_cast<const In*>(in.data_ptr());
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    return;
  }
  for_each_row<2>(out.shape(), {static_cast<char*>(out.data_ptr()), static_cast<char*>(in.data_ptr())},
                  {byte_strides(out), byte_strides(in)}, [&](std::array<char*, 2> p, int64_t n, auto s) {
                    for (int64_t i = 0; i < n; ++i)
                      *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
                  });
}

// out[i] = f(a[i], b[i]).
template <class Out, class A, class B, class F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if (out.is_contiguous() && a.is_contiguous() && b.is_contiguous()) {
    Out* o = static_cast<Out*>(out.data_ptr());
    const A* x = static_cast<const A*>(a.data_ptr());
    const B* y = static_cast<const B*>(b.data_ptr());
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    return;
  }
  for_each_row<3>(out.shape(),
                  {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                   static_cast<char*>(b.data_ptr())},
                  {byte_strides(out), byte_strides(a), byte_strides(b)},
                  [&](std::array<char*, 3> p, int64_t n, auto s) {
                    for (int64_t i = 0; i < n; ++i)
                      *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                          f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]));
                  });
}

// out[i] = f(a[i], b[i], c[i]).
template <class Out, class A, class B, class C, class F>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  for_each_row<4>(out.shape(),
                  {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                   static_cast<char*>(b.data_ptr()), static_cast<char*>(c.data_ptr())},
                  {byte_strides(out), byte_strides(a), byte_strides(b), byte_strides(c)},
                  [&](std::array<char*, 4> p, int64_t n, auto s) {
                    for (int64_t i = 0; i < n; ++i)
                      *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                          f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]),
                            *reinterpret_cast<const C*>(p[3] + i * s[3]));
                  });
}

}  // namespace volt::cpu
