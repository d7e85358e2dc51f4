#include <algorithm>
#include <numeric>

#include <volt/kernels/backend/reduce.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/reduce_util.h>

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
  trace::Range op_range(trace::Layer::op, "sum");
  VOLT_CHECK(a.defined(), "sum: the input is undefined");
  if (autocast_detail::wants_fp32(a)) return sum(autocast_detail::fp32(a), dims, keepdim);
  Tensor in = a.detach();
  if (in.dtype() == DType::boolean || in.dtype() == DType::u8 || in.dtype() == DType::i8 || in.dtype() == DType::i32)
    in = in.to(DType::i64);
  ReducePlan p = plan_reduction(in, dims, keepdim, "sum");
  Tensor out = empty(p.out_shape, in.dtype(), in.device());
  if (p.count == 0) {
    out.zero_();
  } else if (p.rows) {
    backend::call<&backend::ReduceKernels::sum_rows>(in.device(), p.input2d.dtype(), out, p.input2d);
  } else {
    backend::call<&backend::ReduceKernels::sum_cols>(in.device(), p.input2d.dtype(), out, p.input2d);
  }
  Shape in_shape = a.shape(), kd = p.keepdim_shape;
  autograd::attach_differentiable(out, "SumBackward", {a}, [in_shape, kd](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(kd).expand(in_shape).contiguous()};
  });
  return out;
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  trace::Range op_range(trace::Layer::op, "mean");
  VOLT_CHECK(a.defined(), "mean: the input is undefined");
  if (autocast_detail::wants_fp32(a)) return mean(autocast_detail::fp32(a), dims, keepdim);
  VOLT_CHECK(is_floating(a.dtype()), "mean: expected a floating-point tensor, got ", dtype_name(a.dtype()),
             "; cast with to(DType::f32) first");
  ReducePlan p = plan_reduction(a.detach(), dims, keepdim, "mean");
  // An empty reduction gives 0/0 = NaN, as in NumPy.
  return div(sum(a, dims, keepdim), static_cast<double>(p.count));
}

DimLayout dim_layout(const Tensor& a, int64_t dim, bool keepdim, const char* op) {
  DimLayout L;
  const int64_t nd = a.dim();
  L.dim = wrap_dim(dim, nd == 0 ? 1 : nd, op);
  if (nd == 0) return L;  // a scalar reduces to itself; out_shape stays ()
  const Shape& s = a.shape();
  for (int64_t i = 0; i < nd; ++i) {
    if (i < L.dim) L.outer *= s[i];
    else if (i > L.dim) L.inner *= s[i];
    if (i != L.dim) L.out_shape.push_back(s[i]);
    else if (keepdim) L.out_shape.push_back(1);
  }
  L.r = s[L.dim];
  return L;
}

Tensor var(const Tensor& a, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  trace::Range op_range(trace::Layer::op, "var");
  VOLT_CHECK(a.defined(), "var: the input is undefined");
  VOLT_CHECK(is_floating(a.dtype()), "var: expected a floating-point tensor, got ", dtype_name(a.dtype()),
             "; cast with to(DType::f32) first");
  VOLT_CHECK(correction >= 0, "var: correction must be >= 0, got ", correction);
  if (autocast_detail::wants_fp32(a)) return var(autocast_detail::fp32(a), dims, correction, keepdim);
  ReducePlan p = plan_reduction(a.detach(), dims, keepdim, "var");
  // Two-pass (subtract the mean first) for accuracy; composed of differentiable ops, so autograd is exact.
  Tensor centered = sub(a, mean(a, dims, /*keepdim=*/true));
  // Fewer elements than the correction gives a division by <= 0 (inf/NaN), as in PyTorch.
  double denom = static_cast<double>(p.count - correction);
  return div(sum(square(centered), dims, keepdim), std::max(denom, 0.0));
}

namespace {

// Values (when want_values) and i64 indices of the max/min over one dim.
std::pair<Tensor, Tensor> extremum_dim(const Tensor& a, int64_t dim, bool keepdim, bool is_max, bool want_values,
                                       const char* op) {
  VOLT_CHECK(a.defined(), op, ": the input is undefined");
  DimLayout L = dim_layout(a, dim, keepdim, op);
  VOLT_CHECK(L.r > 0, op, ": cannot reduce over dim ", L.dim, " of size 0 (input shape ", a.shape_str(), ")");
  Tensor in = a.detach().contiguous();
  const bool is_bool = in.dtype() == DType::boolean;
  if (is_bool) in = in.to(DType::u8);  // bool has no arithmetic kernels; u8 orders the same way
  Tensor idx = empty(L.out_shape, DType::i64, in.device());
  Tensor vals = want_values ? empty(L.out_shape, in.dtype(), in.device()) : Tensor();
  backend::call<&backend::ReduceKernels::arg_reduce>(in.device(), in.dtype(), vals, idx, in, L.outer, L.r, L.inner,
                                                     is_max);
  if (!want_values) return {Tensor(), idx};
  if (is_bool) vals = vals.to(DType::boolean);
  Shape in_shape = a.shape();
  Tensor sidx = idx;
  autograd::attach_differentiable(vals, is_max ? "MaxBackward" : "MinBackward", {a}, [L, in_shape, sidx](const std::vector<Tensor>& g) {
    // The gradient goes to the selected (first) extremum: scatter through a one-hot mask over the reduced dim.
    Tensor idx3 = sidx.reshape({L.outer, 1, L.inner});
    Tensor pos = arange(L.r, DType::i64, g[0].device()).reshape({1, L.r, 1});
    Tensor g3 = g[0].reshape({L.outer, 1, L.inner});
    Tensor z = zeros({}, g[0].dtype(), g[0].device());
    return std::vector<Tensor>{where(eq(idx3, pos), g3, z).reshape(in_shape)};
  });
  return {vals, idx};
}

Tensor extremum_all(const Tensor& a, bool is_max, const char* op) {
  VOLT_CHECK(a.defined(), op, ": the input is undefined");
  VOLT_CHECK(a.numel() > 0, op, ": cannot reduce an empty tensor (shape ", a.shape_str(),
             "); there is no identity for ", op);
  Tensor in = a.detach().contiguous();
  const bool is_bool = in.dtype() == DType::boolean;
  if (is_bool) in = in.to(DType::u8);
  Tensor idx = empty({}, DType::i64, in.device());
  Tensor vals = empty({}, in.dtype(), in.device());
  backend::call<&backend::ReduceKernels::arg_reduce>(in.device(), in.dtype(), vals, idx, in, 1, in.numel(), 1, is_max);
  if (is_bool) vals = vals.to(DType::boolean);
  Tensor sa = a.detach(), so = vals.detach();
  autograd::attach_differentiable(vals, is_max ? "MaxAllBackward" : "MinAllBackward", {a}, [sa, so](const std::vector<Tensor>& g) {
    // Ties share the gradient evenly (PyTorch's rule for the full reduction).
    Tensor hit = eq(sa, so);
    Tensor share = div(g[0], sum(hit).to(g[0].dtype()));
    return std::vector<Tensor>{where(hit, share, zeros({}, g[0].dtype(), g[0].device()))};
  });
  return vals;
}

}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  return extremum_dim(a, dim, keepdim, true, true, "max");
}
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) {
  return extremum_dim(a, dim, keepdim, false, true, "min");
}
Tensor max(const Tensor& a) { return extremum_all(a, true, "max"); }
Tensor min(const Tensor& a) { return extremum_all(a, false, "min"); }
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return extremum_dim(a, dim, keepdim, true, false, "argmax").second;
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  return extremum_dim(a, dim, keepdim, false, false, "argmin").second;
}

}  // namespace volt
