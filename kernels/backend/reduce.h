#pragma once
// Reductions (kernels/ops/reduce_ops.cpp; kernels/cpu/reduce.cpp, kernels/cuda/reduce.cu). Tensors are
// contiguous. A reduction over one dim sees the input as (outer, r, inner): the reduced dim of size r between
// the flattened leading and trailing dims, so any dim of a contiguous tensor is reduced without a copy.
#include <cstdint>

#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct ReduceKernels {
  // in (M, R) -> out (M): row sums in the accumulation type (double for f32 on the CPU). Dispatch dtype: in's.
  Kernel<void(const Tensor& out, const Tensor& in)> sum_rows;
  // in (R, M) -> out (M): column sums. Dispatch dtype: in's.
  Kernel<void(const Tensor& out, const Tensor& in)> sum_cols;
  // in (outer, r, inner) -> indices i64 (outer, inner) and, when defined, values (outer, inner) in in's dtype;
  // the first extremum wins, NaN counts as the extremum. r >= 1. Dispatch dtype: in's.
  Kernel<void(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t outer, int64_t r, int64_t inner,
              bool is_max)>
      arg_reduce;
};

template <>
struct Family<ReduceKernels> {
  static constexpr const char* name = "reduce";
  static constexpr std::tuple kernels{Named{&ReduceKernels::sum_rows, "sum_rows"},
                                      Named{&ReduceKernels::sum_cols, "sum_cols"},
                                      Named{&ReduceKernels::arg_reduce, "arg_reduce"}};
};

}  // namespace volt::backend
