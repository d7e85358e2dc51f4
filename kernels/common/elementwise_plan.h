#pragma once
// How a CUDA elementwise launch walks its operands (kernels/cuda/loops.cuh), decided on the host in plain C++ so
// the CPU tests check it (tests/kernels/test_elementwise_plan.cpp). Operand 0 is the output; every operand is a
// view already broadcast to the output's shape (expanded dims have stride 0), strides in elements.
//
// make_plan picks, cheapest first:
//   Path::Vector   one collapsed dim, the output and every non-broadcast input unit-stride, each unit-stride
//                  pointer aligned to a whole vector: 16-byte loads/stores of vec elements, then a scalar tail;
//   Path::Linear   one collapsed dim (any steps, e.g. a misaligned view or a column): offset = i * step, no div/mod;
//   Path::Strided  the collapsed geometry, offsets from the linear index by div/mod per remaining dim.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <volt/kernels/common/macros.h>
#include <volt/runtime/error.h>

namespace volt::elementwise_plan {

constexpr int kMaxDims = 12;      // after collapsing
constexpr int kVectorBytes = 16;  // one 128-bit access

template <int N>
struct Geometry {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // in elements, per operand
};

// Element offset of each operand for the row-major linear index `linear` of the geometry.
template <int N>
VOLT_HD void offsets(const Geometry<N>& g, int64_t linear, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t i = linear % g.sizes[d];
    linear /= g.sizes[d];
    for (int k = 0; k < N; ++k) off[k] += i * g.strides[k][d];
  }
}

// The same element walk in fewer dims: size-1 dims dropped, and an outer dim merged into the next inner one when
// every operand's outer stride equals its inner stride times the inner size (a contiguous matrix is one dim; a
// bias broadcast over it, strides (0, 1), keeps two). Throws when more than kMaxDims dims remain.
template <int N>
Geometry<N> collapse(const std::vector<int64_t>& sizes, const std::array<const std::vector<int64_t>*, N>& strides) {
  std::vector<int64_t> rsize;                  // innermost first
  std::vector<std::array<int64_t, N>> rstride;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (!rsize.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && (*strides[k])[d] == rstride.back()[k] * rsize.back();
      if (merge) {
        rsize.back() *= sizes[d];
        continue;
      }
    }
    rsize.push_back(sizes[d]);
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = (*strides[k])[d];
    rstride.push_back(s);
  }
  VOLT_CHECK(rsize.size() <= static_cast<size_t>(kMaxDims), "CUDA elementwise: at most ", kMaxDims,
             " dimensions after merging contiguous ones are supported, got ", rsize.size(), " (of ", sizes.size(),
             "); make the operands contiguous first (Tensor::contiguous)");
  Geometry<N> g;
  g.ndim = static_cast<int>(rsize.size());
  for (int i = 0; i < g.ndim; ++i) {
    g.sizes[i] = rsize[g.ndim - 1 - i];
    for (int k = 0; k < N; ++k) g.strides[k][i] = rstride[g.ndim - 1 - i][k];
  }
  return g;
}

// Elements per 16-byte access when the widest operand has `max_itemsize` bytes (f64 2, f32 4, f16/bf16 8, bool 16).
// Every operand moves the same number of elements per step, so the narrower ones use smaller (aligned) accesses.
constexpr int vector_elems(size_t max_itemsize) { return static_cast<int>(kVectorBytes / max_itemsize); }

// The vector path's split of n elements: whole vectors [0, vector_count), then the scalar tail [tail_begin, n).
VOLT_HD int64_t vector_count(int64_t n, int vec) { return n / vec; }
VOLT_HD int64_t tail_begin(int64_t n, int vec) { return n - n % vec; }

enum class Path : uint8_t { Vector, Linear, Strided };

template <int N>
struct Plan {
  Path path = Path::Strided;
  int vec = 1;             // Path::Vector: elements per access
  int64_t steps[N] = {};   // Path::Vector / Path::Linear: operand k's element for linear index i is i * steps[k]
  Geometry<N> geom;        // the collapsed geometry (all paths; Path::Strided walks it)
};

// `addrs` are the operands' first-element addresses (the view's storage offset included), `itemsizes` their
// element sizes in bytes.
template <int N>
Plan<N> make_plan(const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, N>& strides,
                  const std::array<std::uintptr_t, N>& addrs, const std::array<size_t, N>& itemsizes) {
  Plan<N> p;
  p.geom = collapse<N>(shape, strides);
  p.vec = vector_elems(*std::max_element(itemsizes.begin(), itemsizes.end()));
  if (p.geom.ndim > 1) return p;
  p.path = Path::Linear;
  const int64_t n = p.geom.ndim == 0 ? 1 : p.geom.sizes[0];
  for (int k = 0; k < N; ++k) p.steps[k] = p.geom.ndim == 0 ? 0 : p.geom.strides[k][0];
  if (p.vec < 2 || n < p.vec || p.steps[0] != 1) return p;
  for (int k = 1; k < N; ++k)
    if (p.steps[k] != 0 && p.steps[k] != 1) return p;
  for (int k = 0; k < N; ++k) {
    const std::uintptr_t bytes = static_cast<std::uintptr_t>(p.vec) * itemsizes[k];
    if (p.steps[k] == 1 && addrs[k] % bytes != 0) return p;  // a broadcast operand is read one element at a time
  }
  p.path = Path::Vector;
  return p;
}

}  // namespace volt::elementwise_plan
