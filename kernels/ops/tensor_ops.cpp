// kernels/tensor_ops.h, the ops composed from other public ops (their CUDA paths and autograd come from those):
// logsumexp, norm, std, any, all, masked_fill, tril, triu, pad, repeat, split, chunk.
#include <cmath>
#include <string>

#include <volt/kernels/ops.h>
#include <volt/runtime/trace.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/tensor_ops.h>

namespace volt {

namespace {

void check_defined(const Tensor& t, const char* op, const char* arg) {
  VOLT_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}

void check_floating(const Tensor& t, const char* op) {
  VOLT_CHECK(is_floating(t.dtype()), op, ": argument 'input' has dtype ", dtype_name(t.dtype()),
             "; expected a floating dtype (float32, float64, float16, bfloat16)");
}

// The reduced dims, wrapped and checked for repeats (empty = all).
std::vector<int64_t> reduce_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < x.dim(); ++i) out.push_back(i);
    return out;
  }
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, x.dim(), op);
    for (int64_t o : out)
      VOLT_CHECK(o != d, op, ": dim ", d, " appears more than once in 'dims'; expected each dim at most once");
    out.push_back(d);
  }
  return out;
}

// The max over several dims (keepdim), as one max over the reduced dims flattened to the last one (so its
// gradient goes to one element, the first maximum in that order).
Tensor amax_keepdim(const Tensor& x, const std::vector<int64_t>& dims, bool is_max = true) {
  if (x.dim() == 0) return x;
  Shape perm, kept_shape;
  std::vector<bool> reduced(x.dim(), false);
  for (int64_t d : dims) reduced[d] = true;
  int64_t r = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (!reduced[i]) perm.push_back(i);
    kept_shape.push_back(reduced[i] ? 1 : x.size(i));
  }
  for (int64_t i = 0; i < x.dim(); ++i)
    if (reduced[i]) {
      perm.push_back(i);
      r *= x.size(i);
    }
  Shape flat;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (!reduced[i]) flat.push_back(x.size(i));
  flat.push_back(r);
  Tensor y = x.permute(perm).reshape(flat);
  Tensor m = is_max ? max(y, -1).first : min(y, -1).first;
  return m.reshape(kept_shape);
}

// keepdim result -> the caller's shape.
Tensor drop_dims(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim || dims.empty()) return t;
  Shape s;
  std::vector<bool> reduced(t.dim(), false);
  for (int64_t d : dims) reduced[d] = true;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (!reduced[i]) s.push_back(t.size(i));
  return t.reshape(s);
}

// sqrt(s) with gradient 0 (not inf * 0) where s == 0, as PyTorch's norm and std backwards give.
Tensor safe_root(const Tensor& s, double inv_p) {
  Tensor is_zero = eq(s, 0.0);
  Tensor safe = where(is_zero, scalar_tensor(1.0, s.dtype(), s.device()), s);
  Tensor root = inv_p == 0.5 ? sqrt(safe) : pow(safe, inv_p);
  return where(is_zero, scalar_tensor(0.0, s.dtype(), s.device()), root);
}

}  // namespace

// ---- reductions ------------------------------------------------------------------------------------------------

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  trace::Range op_range(trace::Layer::op, "logsumexp");
  check_defined(x, "logsumexp", "input");
  check_floating(x, "logsumexp");
  if (autocast_detail::wants_fp32(x)) return logsumexp(autocast_detail::fp32(x), dims, keepdim);
  const std::vector<int64_t> ds = reduce_dims(x, dims, "logsumexp");
  if (x.numel() == 0) return log(sum(exp(x), ds, keepdim));  // -inf over empty dims, as PyTorch
  // The max is a constant shift (detached): the gradient is softmax's either way. An infinite max is replaced by 0
  // so that all -inf gives log(0) = -inf and +inf gives +inf rather than NaN from inf - inf.
  Tensor m = amax_keepdim(x.detach(), ds);
  m = where(eq(abs(m), INFINITY), scalar_tensor(0.0, m.dtype(), m.device()), m);
  Tensor out = add(log(sum(exp(sub(x, m)), ds, /*keepdim=*/true)), m);
  return drop_dims(out, ds, keepdim);
}

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  trace::Range op_range(trace::Layer::op, "norm");
  check_defined(x, "norm", "input");
  check_floating(x, "norm");
  VOLT_CHECK(!std::isnan(p) && (p >= 0 || p == -INFINITY), "norm: p = ", p,
             " is not supported; expected p >= 0, INFINITY or -INFINITY");
  if (autocast_detail::wants_fp32(x)) return norm(autocast_detail::fp32(x), p, dims, keepdim);
  const std::vector<int64_t> ds = reduce_dims(x, dims, "norm");
  if (p == 0) return cast(sum(ne(x.detach(), 0.0), ds, keepdim), x.dtype());
  if (std::isinf(p)) {
    if (x.numel() == 0) return sum(abs(x), ds, keepdim);  // PyTorch refuses; 0 is the max over nothing of |x|
    return drop_dims(amax_keepdim(abs(x), ds, p > 0), ds, keepdim);
  }
  if (p == 1) return sum(abs(x), ds, keepdim);
  if (p == 2) return safe_root(sum(square(x), ds, keepdim), 0.5);
  return safe_root(sum(pow(abs(x), p), ds, keepdim), 1.0 / p);
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  trace::Range op_range(trace::Layer::op, "std");
  check_defined(x, "std", "input");
  check_floating(x, "std");
  return safe_root(var(x, dims, unbiased ? 1 : 0, keepdim), 0.5);
}

Tensor any(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined(x, "any", "input");
  const std::vector<int64_t> ds = reduce_dims(x, dims, "any");
  return gt(sum(ne(x.detach(), 0.0), ds, keepdim), 0.0);
}

Tensor all(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined(x, "all", "input");
  const std::vector<int64_t> ds = reduce_dims(x, dims, "all");
  return eq(sum(eq(x.detach(), 0.0), ds, keepdim), 0.0);
}

// ---- masking and triangular parts ------------------------------------------------------------------------------

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  trace::Range op_range(trace::Layer::op, "masked_fill");
  check_defined(x, "masked_fill", "input");
  check_defined(mask, "masked_fill", "mask");
  VOLT_CHECK(mask.dtype() == DType::boolean, "masked_fill: argument 'mask' has dtype ", dtype_name(mask.dtype()),
             "; expected bool (e.g. from a comparison such as eq(x, 0.0))");
  VOLT_CHECK(mask.device() == x.device(), "masked_fill: argument 'mask' is on ", mask.device().str(),
             " but the input is on ", x.device().str(), "; move it with .to(device)");
  bool fits = mask.dim() <= x.dim();
  for (int64_t i = 1; fits && i <= mask.dim(); ++i)
    fits = mask.size(-i) == 1 || mask.size(-i) == x.size(-i);
  VOLT_CHECK(fits, "masked_fill: argument 'mask' of shape ", mask.shape_str(),
             " does not broadcast to the input's shape ", x.shape_str());
  return where(mask, scalar_tensor(value, x.dtype(), x.device()), x);
}

namespace {

Tensor triangle(const Tensor& x, int64_t k, bool lower, const char* op) {
  trace::Range op_range(trace::Layer::op, op);
  check_defined(x, op, "input");
  VOLT_CHECK(x.dim() >= 2, op, ": argument 'input' has shape ", x.shape_str(),
             "; expected at least 2 dims (the last two are the matrix)");
  const int64_t R = x.size(-2), C = x.size(-1);
  Tensor rows = arange(R, DType::i64, x.device()).reshape({R, 1});
  Tensor cols = arange(C, DType::i64, x.device()).reshape({1, C});
  Tensor diag = sub(cols, rows);  // col - row
  Tensor keep = lower ? le(diag, static_cast<double>(k)) : ge(diag, static_cast<double>(k));
  return where(keep, x, scalar_tensor(0.0, x.dtype(), x.device()));
}

}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle(x, k, /*lower=*/true, "tril"); }
Tensor triu(const Tensor& x, int64_t k) { return triangle(x, k, /*lower=*/false, "triu"); }

// ---- shape ops -------------------------------------------------------------------------------------------------

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  trace::Range op_range(trace::Layer::op, "pad");
  check_defined(x, "pad", "input");
  VOLT_CHECK(pads.size() % 2 == 0, "pad: argument 'pads' has ", pads.size(),
             " values; expected (before, after) pairs, starting from the last dim");
  VOLT_CHECK(static_cast<int64_t>(pads.size() / 2) <= x.dim(), "pad: argument 'pads' has ", pads.size() / 2,
             " pairs but the input has shape ", x.shape_str(), "; expected at most one pair per dim");
  Tensor y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i);
    const int64_t before = pads[2 * i], after = pads[2 * i + 1];
    const int64_t n = y.size(d);
    VOLT_CHECK(n + before + after >= 0, "pad: pads (", before, ", ", after, ") for dim ", d,
               " would leave a negative size (input shape ", x.shape_str(), ")");
    // Negative pads crop first.
    const int64_t start = before < 0 ? -before : 0, stop = after < 0 ? n + after : n;
    if (start > 0 || stop < n) y = y.narrow(d, start, std::max<int64_t>(stop - start, 0));
    std::vector<Tensor> parts;
    auto filler = [&](int64_t len) {
      Shape s = y.shape();
      s[d] = len;
      return full(s, value, y.dtype(), y.device());
    };
    if (before > 0) parts.push_back(filler(before));
    parts.push_back(y);
    if (after > 0) parts.push_back(filler(after));
    if (parts.size() > 1) y = cat(parts, d);
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats) {
  trace::Range op_range(trace::Layer::op, "repeat");
  check_defined(x, "repeat", "input");
  const int64_t n = static_cast<int64_t>(repeats.size());
  VOLT_CHECK(n >= x.dim(), "repeat: argument 'repeats' has ", n, " values but the input has shape ", x.shape_str(),
             "; expected at least one per dim");
  for (int64_t r : repeats)
    VOLT_CHECK(r >= 0, "repeat: argument 'repeats' holds ", r, "; expected non-negative counts");
  Shape padded(n - x.dim(), 1), interleaved, expanded, result;
  for (int64_t s : x.shape()) padded.push_back(s);
  for (int64_t i = 0; i < n; ++i) {
    interleaved.push_back(1);
    interleaved.push_back(padded[i]);
    expanded.push_back(repeats[i]);
    expanded.push_back(padded[i]);
    result.push_back(repeats[i] * padded[i]);
  }
  return x.reshape(interleaved).expand(expanded).reshape(result);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  check_defined(x, "split", "input");
  VOLT_CHECK(x.dim() >= 1, "split: argument 'input' is zero-dimensional; expected at least one dim");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    VOLT_CHECK(s >= 0, "split: argument 'split_sizes' holds ", s, "; expected non-negative sizes");
    total += s;
  }
  VOLT_CHECK(total == x.size(d), "split: argument 'split_sizes' adds up to ", total, " but dim ", d,
             " of the input (shape ", x.shape_str(), ") has size ", x.size(d), "; expected them to be equal");
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : split_sizes) {
    out.push_back(x.narrow(d, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined(x, "split", "input");
  VOLT_CHECK(x.dim() >= 1, "split: argument 'input' is zero-dimensional; expected at least one dim");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  VOLT_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: argument 'split_size' is ", split_size,
             "; expected a positive size");
  if (n == 0) return {x};
  std::vector<int64_t> sizes;
  for (int64_t off = 0; off < n; off += split_size) sizes.push_back(std::min(split_size, n - off));
  return split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined(x, "chunk", "input");
  VOLT_CHECK(chunks > 0, "chunk: argument 'chunks' is ", chunks, "; expected a positive count");
  VOLT_CHECK(x.dim() >= 1, "chunk: argument 'input' is zero-dimensional; expected at least one dim");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  return split(x, (n + chunks - 1) / chunks, d);  // an empty dim gives one empty piece, as torch.chunk
}

}  // namespace volt
