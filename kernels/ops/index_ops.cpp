// Indexing and joining: cat, stack, index_select, gather, embedding, one_hot.
//
// Forward passes copy through the backend kernels (kernels/backend/index.h). Backward passes of the
// selecting ops scatter-add the output gradient into a zero tensor of the input's shape, accumulating in
// f32/f64 (16-bit inputs get their gradient rounded once at the end, not at every addition).
#include <algorithm>
#include <string>

#include <volt/kernels/backend/elementwise.h>
#include <volt/kernels/backend/index.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/index_util.h>

namespace volt {

using namespace index_detail;

namespace {

// grad (outer, n, inner) scattered into a zero (outer, D, inner) tensor of `shape`, returned as `dtype`. `check`:
// what the kernels check the indices for (the forward's check: the indices may have changed since).
Tensor index_add_backward(const Tensor& grad, const Tensor& idx, const Shape& shape, DType dtype, int64_t outer,
                          int64_t D, int64_t inner, IndexCheck check) {
  DType acc = accum_dtype(dtype);
  Tensor out = zeros(shape, acc, grad.device());
  Tensor g = grad.to(acc).contiguous();
  backend::call<&backend::IndexKernels::index_add>(out.device(), out.dtype(), out, g, idx, outer, D, inner, check);
  return out.to(dtype);
}

}  // namespace

// ---- cat / stack ------------------------------------------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  trace::Range op_range(trace::Layer::op, "cat");
  VOLT_CHECK(!tensors.empty(), "cat: argument 'tensors' is empty; expected at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i)
    VOLT_CHECK(tensors[i].defined(), "cat: tensors[", i, "] is an undefined tensor");
  const Tensor& first = tensors[0];
  VOLT_CHECK(first.dim() > 0, "cat: tensors[0] is zero-dimensional; expected tensors with at least one dim "
             "(unsqueeze scalars, or use stack)");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  DType dt = first.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    VOLT_CHECK(t.device() == first.device(), "cat: tensors[", i, "] is on ", t.device().str(), " but tensors[0] is on ",
               first.device().str(), "; expected all tensors on one device");
    VOLT_CHECK(t.dim() == first.dim(), "cat: tensors[", i, "] has shape ", t.shape_str(), " (", t.dim(),
               " dims) but tensors[0] has shape ", first.shape_str(), "; expected the same number of dims");
    for (int64_t k = 0; k < first.dim(); ++k)
      VOLT_CHECK(k == d || t.size(k) == first.size(k), "cat: tensors[", i, "] has shape ", t.shape_str(),
                 " but tensors[0] has shape ", first.shape_str(), "; expected equal sizes except in dim ", d,
                 " (mismatch in dim ", k, ")");
    out_shape[d] += t.size(d);
    dt = promote_types(dt, t.dtype());
  }
  Tensor out = empty(out_shape, dt, first.device());
  std::vector<int64_t> sizes;
  std::vector<DType> dtypes;
  std::vector<bool> needs;
  {
    NoGradGuard ng;
    int64_t off = 0;
    for (const Tensor& t : tensors) {
      const int64_t n = t.size(d);
      // The cast kernel writes through the strided slice, converting dtypes on the way.
      if (n > 0 && out.numel() > 0)
        backend::call<&backend::ElementwiseKernels::cast>(out.device(), out.dtype(), out.narrow(d, off, n), t.detach());
      off += n;
      sizes.push_back(n);
      dtypes.push_back(t.dtype());
      needs.push_back(t.requires_grad());
    }
  }
  autograd::attach_differentiable(out, "CatBackward", tensors, [d, sizes, dtypes, needs](const std::vector<Tensor>& g) {
    std::vector<Tensor> r;
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor gi;
      if (needs[i]) {
        gi = g[0].narrow(d, off, sizes[i]);
        if (gi.dtype() != dtypes[i]) gi = gi.to(dtypes[i]);
      }
      r.push_back(gi);
      off += sizes[i];
    }
    return r;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  VOLT_CHECK(!tensors.empty(), "stack: argument 'tensors' is empty; expected at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i) {
    VOLT_CHECK(tensors[i].defined(), "stack: tensors[", i, "] is an undefined tensor");
    VOLT_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensors[", i, "] has shape ", tensors[i].shape_str(),
               " but tensors[0] has shape ", tensors[0].shape_str(), "; expected all shapes equal");
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

// ---- index_select / embedding -------------------------------------------------------------------------------

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  trace::Range op_range(trace::Layer::op, "index_select");
  check_defined(a, "index_select", "input");
  check_defined(index, "index_select", "index");
  check_same_device(a, index, "index_select", "index");
  VOLT_CHECK(a.dim() >= 1, "index_select: argument 'input' is zero-dimensional; expected at least one dim");
  VOLT_CHECK(index.dim() <= 1, "index_select: argument 'index' must be 1-D, got shape ", index.shape_str());
  const int64_t d = wrap_dim(dim, a.dim(), "index_select");
  Tensor idx = as_index(index, "index_select", "index", /*allow_i32=*/true);
  // The kernels check the indices, as embedding's do (runtime/index_check.h).
  const IndexCheck check{IndexCheckSite::index_select, static_cast<int32_t>(d)};
  const Shape& s = a.shape();
  const int64_t outer = prod(s, 0, d), D = s[d], inner = prod(s, d + 1, s.size());
  Shape out_shape = s;
  out_shape[d] = idx.numel();
  Tensor out = empty(out_shape, a.dtype(), a.device());
  if (idx.numel() > 0)  // also for rows with no elements: the kernel then only checks the indices
    backend::call<&backend::IndexKernels::index_select>(out.device(), out.dtype(), out, a.detach().contiguous(), idx,
                                                        outer, D, inner, check);
  Shape in_shape = s;
  DType dt = a.dtype();
  autograd::attach_differentiable(out, "IndexSelectBackward", {a}, [=](const std::vector<Tensor>& g) {
    Tensor gi = index_add_backward(g[0].detach(), idx, in_shape, dt, outer, D, inner, check);
    return std::vector<Tensor>{autograd::linear_in_grad(gi, g[0], "IndexSelectBackwardBackward",
                                                        [d, idx](const Tensor& gg) { return index_select(gg, d, idx); })};
  });
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  trace::Range op_range(trace::Layer::op, "embedding");
  check_defined(weight, "embedding", "weight");
  check_defined(indices, "embedding", "indices");
  check_same_device(weight, indices, "embedding", "indices");
  VOLT_CHECK(weight.dim() == 2, "embedding: argument 'weight' must be 2-D (num_embeddings, embedding_dim), got shape ",
             weight.shape_str());
  Tensor idx = as_index(indices, "embedding", "indices", /*allow_i32=*/true);
  const int64_t V = weight.size(0), D = weight.size(1);
  if (padding_idx)
    VOLT_CHECK(*padding_idx >= -V && *padding_idx < V, "embedding: padding_idx ", *padding_idx,
               " is out of range for an embedding table of size ", V, " (expected ", -V, " <= padding_idx < ", V, ")");
  const int64_t pad = padding_idx ? (*padding_idx < 0 ? *padding_idx + V : *padding_idx) : -1;
  // The kernels check the indices themselves (runtime/index_check.h): the CPU's throw before using any; a GPU's
  // are reported at its next synchronisation, so the forward neither waits for the device nor reads it (and can
  // be captured in a graph).
  constexpr IndexCheck kCheck{IndexCheckSite::embedding};
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = empty(out_shape, weight.dtype(), weight.device());
  if (idx.numel() > 0)  // also for rows of width 0: the kernel then only checks the indices
    backend::call<&backend::IndexKernels::index_select>(out.device(), out.dtype(), out, weight.detach().contiguous(),
                                                        idx, 1, V, D, kCheck);
  Shape w_shape = weight.shape();
  DType dt = weight.dtype();
  autograd::attach_differentiable(out, "EmbeddingBackward", {weight}, [=](const std::vector<Tensor>& g) {
    Tensor gw = index_add_backward(g[0].detach(), idx, w_shape, dt, 1, V, D, kCheck);
    if (pad >= 0) gw.narrow(0, pad, 1).zero_();  // the padding row is not trained
    return std::vector<Tensor>{autograd::linear_in_grad(gw, g[0], "EmbeddingBackwardBackward", [idx, pad](const Tensor& gg) {
      Tensor rows = embedding(gg, idx);
      return pad < 0 ? rows : where(eq(idx, static_cast<double>(pad)).unsqueeze(-1), zeros_like(rows), rows);
    })};
  });
  return out;
}

// ---- gather ------------------------------------------------------------------------------------------------

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  trace::Range op_range(trace::Layer::op, "gather");
  check_defined(a, "gather", "input");
  check_defined(index, "gather", "index");
  check_same_device(a, index, "gather", "index");
  VOLT_CHECK(a.dim() >= 1, "gather: argument 'input' is zero-dimensional; expected at least one dim");
  VOLT_CHECK(a.dim() <= kIndexMaxDims, "gather: at most ", kIndexMaxDims, " dims are supported, got ", a.dim());
  VOLT_CHECK(index.dim() == a.dim(), "gather: argument 'index' has shape ", index.shape_str(), " but input has shape ",
             a.shape_str(), "; expected the same number of dims");
  const int64_t d = wrap_dim(dim, a.dim(), "gather");
  for (int64_t k = 0; k < a.dim(); ++k)
    VOLT_CHECK(k == d || index.size(k) <= a.size(k), "gather: argument 'index' has shape ", index.shape_str(),
               " which exceeds input shape ", a.shape_str(), " in dim ", k, "; expected index.size(k) <= input.size(k) "
               "for every dim k != ", d);
  Tensor idx = as_index(index, "gather", "index", /*allow_i32=*/true);
  // The kernels check the indices (runtime/index_check.h), the backward's too; an empty index has none to check.
  const IndexCheck check{IndexCheckSite::gather, static_cast<int32_t>(d)};
  Tensor src = a.detach();
  Tensor out = empty(index.shape(), a.dtype(), a.device());
  if (out.numel() > 0)
    backend::call<&backend::IndexKernels::gather>(out.device(), src.dtype(), out, src, idx,
                                                  make_geometry(index.shape(), src, d), check);
  Shape in_shape = a.shape();
  DType dt = a.dtype();
  autograd::attach_differentiable(out, "GatherBackward", {a}, [=](const std::vector<Tensor>& g) {
    DType acc = accum_dtype(dt);
    Tensor grad = zeros(in_shape, acc, g[0].device());
    Tensor gc = g[0].detach().to(acc).contiguous();
    if (gc.numel() > 0)
      backend::call<&backend::IndexKernels::scatter_add>(grad.device(), grad.dtype(), grad, gc, idx,
                                                         make_geometry(idx.shape(), grad, d), check);
    return std::vector<Tensor>{autograd::linear_in_grad(grad.to(dt), g[0], "GatherBackwardBackward",
                                                        [d, idx](const Tensor& gg) { return gather(gg, d, idx); })};
  });
  return out;
}

// ---- one_hot -----------------------------------------------------------------------------------------------

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_defined(indices, "one_hot", "indices");
  Tensor idx = as_index(indices, "one_hot", "indices", /*allow_i32=*/false);
  VOLT_CHECK(num_classes == -1 || num_classes >= 1, "one_hot: argument 'num_classes' is ", num_classes,
             "; expected a positive count or -1 (infer max + 1)");
  if (num_classes == -1) {
    VOLT_CHECK(idx.numel() > 0, "one_hot: num_classes = -1 cannot be inferred from an empty 'indices' tensor");
    Tensor host = idx.is_cuda() ? idx.to(kCPU) : idx;
    const int64_t* p = static_cast<const int64_t*>(host.data_ptr());
    num_classes = *std::max_element(p, p + host.numel()) + 1;
    VOLT_CHECK(num_classes >= 1, "one_hot: every index is negative (max ", num_classes - 1,
               "); expected class indices >= 0");
    const int64_t* neg = std::find_if(p, p + host.numel(), [](int64_t v) { return v < 0; });
    if (neg != p + host.numel())  // the indices are on the host already: no need to wait for the kernel's check
      VOLT_FAIL(detail::index_check_message(IndexCheck{IndexCheckSite::one_hot}, neg - p, *neg, num_classes));
  }
  // The kernels check the indices (runtime/index_check.h); num_classes >= 1, so an empty output has no indices.
  Shape out_shape = indices.shape();
  out_shape.push_back(num_classes);
  Tensor out = empty(out_shape, DType::i64, indices.device());
  if (out.numel() > 0)
    backend::call<&backend::IndexKernels::one_hot>(out.device(), out.dtype(), out, idx, num_classes,
                                                   IndexCheck{IndexCheckSite::one_hot});
  return out;
}

}  // namespace volt
