#pragma once
// The order sort/topk use on every backend (kernels/cpu/scan_sort.cpp, kernels/cuda/scan_sort.cu): a strict total
// order over (key, position) pairs, so the CPU and CUDA results agree element for element, and equal keys keep
// their positions' order (what a stable sort gives). NaN counts as larger than every number (last when ascending,
// first when descending), as in PyTorch. Positions < 0 mark the CUDA sort's padding and go after everything.
#include <cstdint>

#include <volt/kernels/common/half.h>
#include <volt/kernels/common/macros.h>

namespace volt {

// The comparison type of an element type: f32 for the 16-bit floats, int for bool, the type itself otherwise.
template <class T> struct sort_key_type { using type = T; };
template <> struct sort_key_type<Half> { using type = float; };
template <> struct sort_key_type<BFloat16> { using type = float; };
template <> struct sort_key_type<bool> { using type = int; };
template <class T> using sort_key_t = typename sort_key_type<T>::type;

// Whether (a, ia) comes before (b, ib).
template <class K>
VOLT_HD bool sort_before(K a, int64_t ia, K b, int64_t ib, bool descending) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  const bool a_nan = a != a, b_nan = b != b;  // false for integer keys
  if (a_nan || b_nan) {
    if (a_nan && b_nan) return ia < ib;
    return descending ? a_nan : b_nan;
  }
  if (a < b) return !descending;
  if (b < a) return descending;
  return ia < ib;
}

}  // namespace volt
