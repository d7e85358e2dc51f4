#include <algorithm>
#include <numeric>

#include "kernels/backend.h"
#include "kernels/ops.h"
#include "kernels/ops/reduce_util.h"

namespace volt {

ReducePlan plan_reduction(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim, const char* op) {
  ReducePlan p;
  const int64_t nd = a.dim();
  std::vector<bool> red(static_cast<size_t>(nd), dims_in.empty());
  for (int64_t d : dims_in) {
    int64_t w = wrap_dim(d, nd, op);
    VOLT_CHECK(!red[w] || dims_in.empty(), op, ": dim ", w, " appears more than once");
    red[w] = true;
  }
  p.reduced = red;
  p.keep = 1;
  p.count = 1;
  for (int64_t i = 0; i < nd; ++i) {
    if (red[i]) {
      p.count *= a.shape()[i];
      p.keepdim_shape.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.keep *= a.shape()[i];
      p.keepdim_shape.push_back(a.shape()[i]);
      p.out_shape.push_back(a.shape()[i]);
    }
  }
  // Reduced dims first or last in memory order lets the kernels read the input in place.
  Shape perm;
  for (int64_t i = 0; i < nd; ++i) if (!red[i]) perm.push_back(i);
  for (int64_t i = 0; i < nd; ++i) if (red[i]) perm.push_back(i);
  bool prefix = true, suffix = true;
  for (int64_t i = 0; i < nd; ++i) {
    int64_t nred_before = std::count(red.begin(), red.begin() + i, true);
    if (red[i] && nred_before != i) prefix = false;
    if (!red[i] && nred_before != 0) suffix = false;
  }
  if (a.is_contiguous() && prefix && !suffix) {
    p.rows = false;
    p.input2d = a.reshape({p.count, p.keep});
  } else {
    p.rows = true;
    Tensor moved = (a.is_contiguous() && suffix) ? a : a.permute(perm).contiguous();
    p.input2d = moved.reshape({p.keep, p.count});
  }
  return p;
}

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  VOLT_CHECK(a.defined(), "sum: the input is undefined");
  Tensor in = a.detach();
  if (in.dtype() == DType::boolean || in.dtype() == DType::u8 || in.dtype() == DType::i32) in = in.to(DType::i64);
  ReducePlan p = plan_reduction(in, dims, keepdim, "sum");
  Tensor out = empty(p.out_shape, in.dtype(), in.device());
  if (p.count == 0) {
    out.zero_();
  } else if (p.rows) {
    VOLT_DISPATCH_DEVICE(in.device(), sum_rows, out, p.input2d);
  } else {
    VOLT_DISPATCH_DEVICE(in.device(), sum_cols, out, p.input2d);
  }
  Shape in_shape = a.shape(), kd = p.keepdim_shape;
  autograd::attach(out, "SumBackward", {a}, [in_shape, kd](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(kd).expand(in_shape).contiguous()};
  });
  return out;
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  VOLT_CHECK(a.defined(), "mean: the input is undefined");
  VOLT_CHECK(is_floating(a.dtype()), "mean: expected a floating-point tensor, got ", dtype_name(a.dtype()),
             "; cast with to(DType::f32) first");
  ReducePlan p = plan_reduction(a.detach(), dims, keepdim, "mean");
  // An empty reduction gives 0/0 = NaN, as in NumPy.
  return div(sum(a, dims, keepdim), static_cast<double>(p.count));
}

}  // namespace volt
