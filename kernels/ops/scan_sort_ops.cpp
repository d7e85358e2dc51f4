// kernels/tensor_ops.h, the ops with their own kernels: cumsum, cumprod, sort, topk, flip (kernels/backend/
// tensor_ops.h) and scatter_add, index_add (the accumulating kernels of kernels/backend/index.h).
// Backward formulas are written in these ops themselves (a reversed cumsum, flip, scatter_add, gather,
// index_select), so they are differentiable; cumprod keeps a kernel for its first-order backward.
#include <string>

#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/backend/tensor_ops.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/trace.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/index_util.h>
#include <volt/kernels/tensor_ops.h>

namespace volt {

using namespace index_detail;

namespace {

void check_floating(const Tensor& t, const char* op, const char* arg) {
  VOLT_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' has dtype ", dtype_name(t.dtype()),
             "; expected a floating dtype (float32, float64, float16, bfloat16)");
}

struct Lines {
  int64_t outer, D, inner;
};
Lines lines_of(const Shape& s, int64_t d) {
  return {prod(s, 0, d), s[d], prod(s, d + 1, s.size())};
}

// x (any strides) copied into a fresh contiguous tensor of dtype `dt` (never x's own storage).
Tensor fresh_copy(const Tensor& x, DType dt) {
  Tensor c = x.detach();
  return c.dtype() == dt ? c.clone() : c.to(dt).contiguous();
}

// Prefix (or suffix, reverse) sums of a numeric tensor along d; the gradient is the sum the other way.
Tensor scan_sum(const Tensor& x, int64_t d, bool reverse) {
  const Lines L = lines_of(x.shape(), d);
  Tensor in = x.detach().contiguous();
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0)
    backend::call<&backend::TensorOpKernels::cumsum>(out.device(), out.dtype(), out, in, L.outer, L.D, L.inner,
                                                     reverse);
  autograd::attach_differentiable(out, reverse ? "CumsumReverseBackward" : "CumsumBackward", {x},
                                  [d, reverse](const std::vector<Tensor>& g) {
                                    return std::vector<Tensor>{scan_sum(g[0], d, !reverse)};
                                  });
  return out;
}

// cumprod's gradient written in differentiable ops (for create_graph), exact where x has zeros:
//   grad[i] = prod_{k<i} x[k] * sum_{j>=i} g[j] * prod_{i<k<=j} x[k]
// with the inner products of every (i, j) pair from one cumprod of an (n, n) matrix per line.
Tensor cumprod_grad_differentiable(const Tensor& x, const Tensor& g, int64_t d) {
  const int64_t nd = x.dim(), n = x.size(d);
  Shape perm;
  for (int64_t i = 0; i < nd; ++i)
    if (i != d) perm.push_back(i);
  perm.push_back(d);
  Shape inverse(nd);
  for (int64_t i = 0; i < nd; ++i) inverse[perm[i]] = i;
  Tensor xl = x.permute(perm), gl = g.permute(perm);  // (..., n)
  Tensor pos = arange(n, DType::i64, x.device());
  Tensor row = pos.reshape({n, 1}), col = pos.reshape({1, n});
  Tensor one = scalar_tensor(1.0, x.dtype(), x.device()), zero = scalar_tensor(0.0, x.dtype(), x.device());
  Shape sq = xl.shape();
  sq.insert(sq.end() - 1, n);                                          // (..., n, n)
  Tensor after = where(gt(col, row), xl.unsqueeze(-2).expand(sq), one);  // [i, k] = x[k] for k > i, else 1
  Tensor inner_prod = cumprod(after, -1);                              // [i, j] = prod_{i<k<=j} x[k]
  Tensor terms = where(ge(col, row), mul(inner_prod, gl.unsqueeze(-2)), zero);
  Tensor before = pad(cumprod(xl, -1).narrow(-1, 0, n - 1), {1, 0}, 1.0);  // prod_{k<i} x[k]
  return mul(before, sum(terms, {-1})).permute(inverse);
}

// A 0-d tensor acts as one element along dim 0 / -1 (PyTorch's rule for scans, sort and flip).
int64_t scan_dim(const Tensor& x, int64_t dim, const char* op) { return wrap_dim(dim, x.dim(), op); }

}  // namespace

// ---- cumsum / cumprod ------------------------------------------------------------------------------------------

Tensor cumsum(const Tensor& x, int64_t dim) {
  trace::Range op_range(trace::Layer::op, "cumsum");
  check_defined(x, "cumsum", "input");
  if (autocast_detail::wants_fp32(x)) return cumsum(autocast_detail::fp32(x), dim);
  const int64_t d = scan_dim(x, dim, "cumsum");
  if (x.dim() == 0) return cumsum(x.reshape({1}), 0).reshape({});
  Tensor in = is_floating(x.dtype()) ? x : x.detach().to(DType::i64);
  return scan_sum(in, d, /*reverse=*/false);
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  trace::Range op_range(trace::Layer::op, "cumprod");
  check_defined(x, "cumprod", "input");
  if (autocast_detail::wants_fp32(x)) return cumprod(autocast_detail::fp32(x), dim);
  const int64_t d = scan_dim(x, dim, "cumprod");
  if (x.dim() == 0) return cumprod(x.reshape({1}), 0).reshape({});
  Tensor in = is_floating(x.dtype()) ? x : x.detach().to(DType::i64);
  const Lines L = lines_of(in.shape(), d);
  Tensor xc = in.detach().contiguous();
  Tensor out = empty(in.shape(), in.dtype(), in.device());
  if (out.numel() > 0)
    backend::call<&backend::TensorOpKernels::cumprod>(out.device(), out.dtype(), out, xc, L.outer, L.D, L.inner);
  if (is_floating(in.dtype()))
    autograd::attach_differentiable(out, "CumprodBackward", {in}, [in, xc, d, L](const std::vector<Tensor>& g) {
      if (autograd::create_graph_enabled()) return std::vector<Tensor>{cumprod_grad_differentiable(in, g[0], d)};
      const DType dt = xc.dtype(), acc = accum_dtype(dt);
      Tensor go = g[0].detach().to(acc).contiguous(), xa = xc.to(acc).contiguous();
      Tensor gi = empty(xc.shape(), acc, xc.device());
      if (gi.numel() > 0)
        backend::call<&backend::TensorOpKernels::cumprod_backward>(gi.device(), acc, gi, go, xa, L.outer, L.D,
                                                                   L.inner);
      return std::vector<Tensor>{gi.to(dt)};
    });
  return out;
}

// ---- sort / topk -----------------------------------------------------------------------------------------------

namespace {

std::pair<Tensor, Tensor> sorted_prefix(const Tensor& x, int64_t d, int64_t k, bool descending, const char* op) {
  const Lines L = lines_of(x.shape(), d);
  Shape out_shape = x.shape();
  out_shape[d] = k;
  Tensor values = empty(out_shape, x.dtype(), x.device());
  Tensor indices = empty(out_shape, DType::i64, x.device());
  if (values.numel() > 0)
    backend::call<&backend::TensorOpKernels::sort>(x.device(), x.dtype(), values, indices, x.detach().contiguous(),
                                                   L.outer, L.D, L.inner, k, descending);
  if (is_floating(x.dtype())) {
    Shape in_shape = x.shape();
    DType dt = x.dtype();
    autograd::attach_differentiable(values, std::string(op == std::string("sort") ? "Sort" : "Topk") + "Backward", {x},
                                    [in_shape, dt, d, indices](const std::vector<Tensor>& g) {
                                      Tensor base = zeros(in_shape, dt, g[0].device());
                                      return std::vector<Tensor>{scatter_add(base, d, indices, g[0])};
                                    });
  }
  return {values, indices};
}

}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  trace::Range op_range(trace::Layer::op, "sort");
  check_defined(x, "sort", "input");
  const int64_t d = scan_dim(x, dim, "sort");
  if (x.dim() == 0) {
    auto [v, i] = sort(x.reshape({1}), 0, descending);
    return {v.reshape({}), i.reshape({})};
  }
  return sorted_prefix(x, d, x.size(d), descending, "sort");
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  trace::Range op_range(trace::Layer::op, "topk");
  check_defined(x, "topk", "input");
  const int64_t d = scan_dim(x, dim, "topk");
  const int64_t size = x.dim() == 0 ? 1 : x.size(d);
  VOLT_CHECK(k >= 0 && k <= size, "topk: k = ", k, " is out of range for dim ", d, " of size ", size, " (input shape ",
             x.shape_str(), "); expected 0 <= k <= ", size);
  if (x.dim() == 0) {
    auto [v, i] = topk(x.reshape({1}), k, 0, largest);
    return k == 1 ? std::pair{v.reshape({}), i.reshape({})} : std::pair{v, i};
  }
  return sorted_prefix(x, d, k, largest, "topk");
}

// ---- flip ------------------------------------------------------------------------------------------------------

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  trace::Range op_range(trace::Layer::op, "flip");
  check_defined(x, "flip", "input");
  VOLT_CHECK(x.dim() <= kFlipMaxDims, "flip: at most ", kFlipMaxDims, " dims are supported, got a tensor of shape ",
             x.shape_str());
  FlipGeometry g;
  g.ndim = static_cast<int>(x.dim());
  std::vector<int64_t> wrapped;
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, x.dim(), "flip");
    for (int64_t w : wrapped)
      VOLT_CHECK(w != d, "flip: dim ", d, " appears more than once in 'dims'; expected each dim at most once");
    wrapped.push_back(d);
    if (x.dim() > 0) g.flip[d] = true;
  }
  Tensor src = x.detach();
  for (int i = 0; i < g.ndim; ++i) {
    g.sizes[i] = x.size(i);
    g.in_strides[i] = src.stride(i);
  }
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0)
    backend::call<&backend::TensorOpKernels::flip>(out.device(), out.dtype(), out, src, g);
  if (is_floating(x.dtype()))
    autograd::attach_differentiable(out, "FlipBackward", {x}, [wrapped](const std::vector<Tensor>& gr) {
      return std::vector<Tensor>{flip(gr[0], wrapped)};
    });
  return out;
}

// ---- scatter_add / index_add -----------------------------------------------------------------------------------

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  trace::Range op_range(trace::Layer::op, "scatter_add");
  const char* op = "scatter_add";
  check_defined(x, op, "input");
  check_defined(index, op, "index");
  check_defined(src, op, "src");
  check_same_device(x, index, op, "index");
  check_same_device(x, src, op, "src");
  check_floating(x, op, "input");
  VOLT_CHECK(src.dtype() == x.dtype(), "scatter_add: argument 'src' has dtype ", dtype_name(src.dtype()),
             " but the input has dtype ", dtype_name(x.dtype()), "; expected the same dtype (cast one of them)");
  VOLT_CHECK(x.dim() >= 1, "scatter_add: argument 'input' is zero-dimensional; expected at least one dim");
  VOLT_CHECK(x.dim() <= kIndexMaxDims, "scatter_add: at most ", kIndexMaxDims, " dims are supported, got ", x.dim());
  VOLT_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), "scatter_add: input ", x.shape_str(), ", index ",
             index.shape_str(), " and src ", src.shape_str(), " must have the same number of dims");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  for (int64_t k = 0; k < x.dim(); ++k) {
    VOLT_CHECK(index.size(k) <= src.size(k), "scatter_add: argument 'index' has shape ", index.shape_str(),
               " which exceeds src's shape ", src.shape_str(), " in dim ", k, "; expected index.size(d) <= src.size(d)");
    VOLT_CHECK(k == d || index.size(k) <= x.size(k), "scatter_add: argument 'index' has shape ", index.shape_str(),
               " which exceeds the input's shape ", x.shape_str(), " in dim ", k,
               "; expected index.size(d) <= input.size(d) for every d != ", d);
  }
  Tensor idx = as_index(index, op, "index", /*allow_i32=*/true);
  const DType dt = x.dtype(), acc = accum_dtype(dt);
  Tensor out = fresh_copy(x, acc);
  Tensor part = src.detach();
  for (int64_t k = 0; k < x.dim(); ++k)
    if (part.size(k) != idx.size(k)) part = part.narrow(k, 0, idx.size(k));
  part = part.to(acc).contiguous();
  if (idx.numel() > 0) {
    const IndexCheck check{IndexCheckSite::scatter_add, static_cast<int32_t>(d)};
    backend::call<&backend::IndexKernels::scatter_add>(out.device(), acc, out, part, idx,
                                                       make_geometry(idx.shape(), out, d), check);
  }
  if (acc != dt) out = out.to(dt);
  Shape src_shape = src.shape();
  autograd::attach_differentiable(out, "ScatterAddBackward", {x, src}, [d, idx, src_shape](const std::vector<Tensor>& gr) {
    Tensor gs = gather(gr[0], d, idx);
    if (gs.shape() != src_shape) {  // src's elements outside index's shape were not used: zero gradient
      std::vector<int64_t> pads;
      for (int64_t k = static_cast<int64_t>(src_shape.size()) - 1; k >= 0; --k) {
        pads.push_back(0);
        pads.push_back(src_shape[k] - gs.size(k));
      }
      gs = pad(gs, pads, 0.0);
    }
    return std::vector<Tensor>{gr[0], gs};
  });
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  trace::Range op_range(trace::Layer::op, "index_add");
  const char* op = "index_add";
  check_defined(x, op, "input");
  check_defined(index, op, "index");
  check_defined(src, op, "src");
  check_same_device(x, index, op, "index");
  check_same_device(x, src, op, "src");
  check_floating(x, op, "input");
  VOLT_CHECK(src.dtype() == x.dtype(), "index_add: argument 'src' has dtype ", dtype_name(src.dtype()),
             " but the input has dtype ", dtype_name(x.dtype()), "; expected the same dtype (cast one of them)");
  VOLT_CHECK(x.dim() >= 1, "index_add: argument 'input' is zero-dimensional; expected at least one dim");
  VOLT_CHECK(index.dim() <= 1, "index_add: argument 'index' must be 1-D, got shape ", index.shape_str());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Shape want = x.shape();
  want[d] = index.numel();
  VOLT_CHECK(src.shape() == want, "index_add: argument 'src' has shape ", src.shape_str(), " but expected ",
             shape_to_string(want), " (the input's shape ", x.shape_str(), " with dim ", d, " of size index.numel() = ",
             index.numel(), ")");
  Tensor idx = as_index(index, op, "index", /*allow_i32=*/true);
  const DType dt = x.dtype(), acc = accum_dtype(dt);
  const Lines L = lines_of(x.shape(), d);
  Tensor out = fresh_copy(x, acc);
  if (idx.numel() > 0)  // also for rows with no elements: the kernel then only checks the indices
    backend::call<&backend::IndexKernels::index_add>(out.device(), acc, out, src.detach().to(acc).contiguous(), idx,
                                                     L.outer, L.D, L.inner,
                                                     IndexCheck{IndexCheckSite::index_add, static_cast<int32_t>(d)});
  if (acc != dt) out = out.to(dt);
  autograd::attach_differentiable(out, "IndexAddBackward", {x, src}, [d, idx](const std::vector<Tensor>& gr) {
    return std::vector<Tensor>{gr[0], index_select(gr[0], d, idx)};
  });
  return out;
}

}  // namespace volt
