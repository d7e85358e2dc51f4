#pragma once
// How a reduction over some dims maps onto the 2-D kernels (rows: reduce the last axis of (keep, count);
// cols: reduce the first axis of (count, keep)).
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt {

struct ReducePlan {
  Shape out_shape;           // result shape (keepdim respected)
  Shape keepdim_shape;       // result shape with reduced dims kept as 1 (for broadcasting back)
  std::vector<bool> reduced; // per input dim
  int64_t keep = 1;          // number of outputs
  int64_t count = 1;         // elements reduced into each output
  bool rows = true;          // input2d is (keep, count) when true, (count, keep) when false
  Tensor input2d;            // contiguous 2-D view or copy of the input
};

ReducePlan plan_reduction(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, const char* op);

// A contiguous tensor seen as (outer, r, inner) around one dim, for kernels that reduce or normalise over a
// single dim without moving data. A 0-d tensor is treated as shape (1).
struct DimLayout {
  int64_t dim = 0;    // the wrapped dim
  int64_t outer = 1;  // product of the sizes before dim
  int64_t r = 1;      // size of dim
  int64_t inner = 1;  // product of the sizes after dim
  Shape out_shape;    // shape with dim removed, or kept as 1 when keepdim
};

DimLayout dim_layout(const Tensor& a, int64_t dim, bool keepdim, const char* op);

}  // namespace volt
