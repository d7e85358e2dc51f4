// Views: new geometry over the same storage. Each records a backward that maps the gradient back to the
// input's geometry.
#include <algorithm>
#include <numeric>

#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>

namespace volt {

namespace {

Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape s = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      VOLT_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_to_string(requested));
      infer = static_cast<int64_t>(i);
    } else {
      VOLT_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in ", shape_to_string(requested));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    VOLT_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_to_string(requested),
               " is invalid for a tensor of shape ", shape_to_string(from), " (", numel, " elements)");
    s[infer] = numel / known;
  }
  VOLT_CHECK(shape_numel(s) == numel, op, ": shape ", shape_to_string(requested), " is invalid for a tensor of shape ",
             shape_to_string(from), " (", numel, " elements)");
  return s;
}

// Strides for viewing `t` as `shape` without copying, if possible: groups of old dims that are contiguous
// with each other ("chunks") must map onto whole groups of new dims.
std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  if (t.numel() == 0 || t.is_contiguous()) return contiguous_strides(shape);
  const Shape& os = t.shape();
  const Shape& ost = t.strides();
  Shape st(shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base = ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

void attach_reshape_backward(const Tensor& out, const Tensor& in, const char* name) {
  Shape in_shape = in.shape();
  autograd::attach_differentiable(out, name, {in}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  });
}

}  // namespace

Tensor Tensor::view(const Shape& shape_req) const {
  Shape s = infer_shape(shape_req, numel(), "view", shape());
  auto st = view_strides(*this, s);
  VOLT_CHECK(st.has_value(), "view: a tensor of shape ", shape_str(), " with strides ", shape_to_string(strides()),
             " cannot be viewed as ", shape_to_string(s), " without a copy; call reshape() or contiguous() first");
  Tensor out = make_view(*this, s, *st, offset());
  attach_reshape_backward(out, *this, "ViewBackward");
  return out;
}

Tensor Tensor::reshape(const Shape& shape_req) const {
  Shape s = infer_shape(shape_req, numel(), "reshape", shape());
  if (s == shape()) return *this;
  if (auto st = view_strides(*this, s)) {
    Tensor out = make_view(*this, s, *st, offset());
    attach_reshape_backward(out, *this, "ReshapeBackward");
    return out;
  }
  return contiguous().view(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  VOLT_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(), " dims for a tensor with ",
             dim(), " dimensions");
  Shape s(dims.size()), st(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    VOLT_CHECK(!used[d], "permute: dim ", d, " appears twice in ", shape_to_string(dims));
    used[d] = true;
    s[i] = shape()[d];
    st[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = make_view(*this, s, st, offset());
  autograd::attach_differentiable(out, "PermuteBackward", {*this}, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() < 2 && dim() == 0) return *this;
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute(perm);
}

Tensor Tensor::t() const {
  VOLT_CHECK(dim() <= 2, "t: expects a tensor with at most 2 dimensions, got shape ", shape_str());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  VOLT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, offset() + start * strides()[d]);
  Shape in_shape = shape();
  DType dt = dtype();
  Device dev = device();
  autograd::attach_differentiable(out, "SliceBackward", {*this}, [=](const std::vector<Tensor>& g) {
    Tensor gi = zeros(in_shape, dt, dev);
    gi.slice(d, start, end, step).copy_(g[0].detach());
    // Linear in g: under create_graph its own backward takes the same slice of the incoming gradient.
    return std::vector<Tensor>{autograd::linear_in_grad(gi, g[0], "SliceBackwardBackward",
                                                        [=](const Tensor& gg) { return gg.slice(d, start, end, step); })};
  });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  VOLT_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow: range [", start, ", ",
             start + length, ") is outside dim ", d, " of size ", shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[d];
  VOLT_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& target) const {
  VOLT_CHECK(static_cast<int64_t>(target.size()) >= dim(), "expand: target ", shape_to_string(target),
             " has fewer dims than the tensor ", shape_str());
  const int64_t lead = static_cast<int64_t>(target.size()) - dim();
  Shape s(target.size()), st(target.size());
  for (int64_t i = 0; i < static_cast<int64_t>(target.size()); ++i) {
    if (i < lead) {
      VOLT_CHECK(target[i] >= 0, "expand: size -1 is not allowed for a new leading dim");
      s[i] = target[i];
      st[i] = 0;
      continue;
    }
    int64_t cur = shape()[i - lead];
    int64_t want = target[i] == -1 ? cur : target[i];
    VOLT_CHECK(cur == want || cur == 1, "expand: dim ", i, " of size ", cur, " cannot expand to ", want,
               " (tensor ", shape_str(), " to ", shape_to_string(target), ")");
    s[i] = want;
    st[i] = (cur == want) ? strides()[i - lead] : 0;
  }
  if (s == shape()) return *this;
  Tensor out = make_view(*this, s, st, offset());
  Shape in_shape = shape();
  autograd::attach_differentiable(out, "ExpandBackward", {*this}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], in_shape)};
  });
  return out;
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : shape()) if (v != 1) s.push_back(v);
  return reshape(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape s = shape();
  s.erase(s.begin() + d);
  return reshape(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return reshape(s);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  VOLT_CHECK(start <= end, "flatten: start_dim ", start, " is after end_dim ", end);
  Shape s(shape().begin(), shape().begin() + start);
  int64_t p = 1;
  for (int64_t i = start; i <= end; ++i) p *= shape()[i];
  s.push_back(p);
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

}  // namespace volt
