// interpolate (nearest, bilinear) and adaptive_avg_pool2d, composed of index_select, mul/add and matmul: the
// source indices, blend weights and averaging matrices are computed on the host, PyTorch's formulas, and the
// ops they feed bring the CUDA path and the gradients.
#include <cmath>
#include <string>

#include <volt/kernels/layer_ops.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/trace.h>

namespace volt {

namespace {

// PyTorch's compute_scales_value: 1 / scale_factor when one was given, else in / out.
template <class T>
T scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale.has_value() && *scale > 0 ? static_cast<T>(1.0 / *scale)
                                         : static_cast<T>(in) / static_cast<T>(out);
}

// Nearest: source index min(floor(dst * scale), in - 1), scale in f32 (PyTorch's nearest_idx, with its exact
// shortcuts for equal and doubled sizes).
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float s = scale_value<float>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    if (out == in) idx[o] = o;
    else if (out == 2 * in) idx[o] = o >> 1;
    else idx[o] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
  }
  return idx;
}

struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<double> w0, w1;
};

// Bilinear along one axis: PyTorch's area_pixel_compute_scale / area_pixel_compute_source_index in T (f32 for
// every dtype but f64, as PyTorch's opmath type).
template <class T>
LinearTaps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  LinearTaps t;
  const T s = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                            : scale_value<T>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    T src = align_corners ? s * static_cast<T>(o) : s * (static_cast<T>(o) + T(0.5)) - T(0.5);
    if (!align_corners && src < T(0)) src = T(0);
    const int64_t i0 = static_cast<int64_t>(src);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const T l1 = src - static_cast<T>(i0);
    t.i0.push_back(i0);
    t.i1.push_back(i1);
    t.w0.push_back(static_cast<double>(T(1) - l1));
    t.w1.push_back(static_cast<double>(l1));
  }
  return t;
}

Tensor index_tensor(const std::vector<int64_t>& idx, Device device) {
  return from_vector<int64_t>(idx, {static_cast<int64_t>(idx.size())}, device);
}

// w laid out to broadcast along `dim` (2 or 3) of an (N, C, H, W) tensor, in `dtype`.
Tensor weight_tensor(const std::vector<double>& w, int64_t dim, DType dtype, Device device) {
  const int64_t n = static_cast<int64_t>(w.size());
  Shape shape = dim == 2 ? Shape{n, 1} : Shape{n};
  return from_vector<double>(w, shape, device).to(dtype);
}

Tensor blend(const Tensor& x, int64_t dim, const LinearTaps& t) {
  Tensor a = index_select(x, dim, index_tensor(t.i0, x.device()));
  Tensor b = index_select(x, dim, index_tensor(t.i1, x.device()));
  return add(mul(a, weight_tensor(t.w0, dim, x.dtype(), x.device())),
             mul(b, weight_tensor(t.w1, dim, x.dtype(), x.device())));
}

// (out, in): row i averages columns [floor(i*in/out), ceil((i+1)*in/out)).
Tensor averaging_matrix(int64_t in, int64_t out, DType dtype, Device device) {
  std::vector<double> m(static_cast<size_t>(in * out), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    const int64_t start = (i * in) / out, end = ((i + 1) * in + out - 1) / out;
    for (int64_t j = start; j < end; ++j) m[static_cast<size_t>(i * in + j)] = 1.0 / static_cast<double>(end - start);
  }
  return from_vector<double>(m, {out, in}, device).to(dtype);
}

}  // namespace

InterpolateMode parse_interpolate_mode(std::string_view mode) {
  if (mode == "nearest") return InterpolateMode::Nearest;
  if (mode == "bilinear") return InterpolateMode::Bilinear;
  VOLT_FAIL("interpolate: mode must be \"nearest\" or \"bilinear\", got \"", std::string(mode), "\"");
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  trace::Range op_range(trace::Layer::op, "interpolate");
  const char* op = "interpolate";
  VOLT_CHECK(x.defined(), op, ": x is undefined");
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
  VOLT_CHECK(x.dim() == 4, op, ": expected x of shape (N, C, H, W) but got ", x.shape_str());
  VOLT_CHECK(o.size.empty() != o.scale_factor.empty(), op,
             ": expected exactly one of size and scale_factor, got ", o.size.empty() ? "neither" : "both");
  VOLT_CHECK(o.size.size() <= 2 && o.scale_factor.size() <= 2, op,
             ": size and scale_factor take one value (both dims) or two (height, width), got ",
             o.size.size() + o.scale_factor.size(), " values");
  VOLT_CHECK(o.mode == InterpolateMode::Bilinear || !o.align_corners.has_value(), op,
             ": align_corners applies only to the bilinear mode; leave it unset for nearest");
  const bool align = o.align_corners.value_or(false);
  int64_t out[2];
  std::optional<double> scale[2];
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x.size(2 + d);
    if (!o.size.empty()) {
      out[d] = o.size[o.size.size() == 2 ? d : 0];
      VOLT_CHECK(out[d] > 0, op, ": size values must be positive, got ", out[d]);
    } else {
      scale[d] = o.scale_factor[o.scale_factor.size() == 2 ? d : 0];
      VOLT_CHECK(*scale[d] > 0 && std::isfinite(*scale[d]), op, ": scale_factor values must be positive, got ",
                 *scale[d]);
      out[d] = static_cast<int64_t>(std::floor(static_cast<double>(in) * *scale[d]));
      VOLT_CHECK(out[d] > 0, op, ": scale_factor ", *scale[d], " turns the input ", d == 0 ? "height" : "width",
                 " ", in, " into an empty output; expected input * scale_factor >= 1");
    }
    VOLT_CHECK(in > 0, op, ": x has shape ", x.shape_str(), "; expected non-empty spatial dims");
  }
  Tensor y = x;
  for (int d = 0; d < 2; ++d) {
    const int64_t dim = 2 + d, in = x.size(dim);
    if (o.mode == InterpolateMode::Nearest) {
      y = index_select(y, dim, index_tensor(nearest_indices(in, out[d], scale[d]), x.device()));
    } else {
      y = blend(y, dim, x.dtype() == DType::f64 ? linear_taps<double>(in, out[d], align, scale[d])
                                                : linear_taps<float>(in, out[d], align, scale[d]));
    }
  }
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size) {
  trace::Range op_range(trace::Layer::op, "adaptive_avg_pool2d");
  const char* op = "adaptive_avg_pool2d";
  VOLT_CHECK(x.defined(), op, ": x is undefined");
  VOLT_CHECK(is_floating(x.dtype()), op, ": expected a floating-point x but got ", dtype_name(x.dtype()));
  VOLT_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected x of shape (N, C, H, W) or (C, H, W) but got ",
             x.shape_str());
  VOLT_CHECK(output_size.first > 0 && output_size.second > 0, op, ": output_size (", output_size.first, ", ",
             output_size.second, ") must be positive");
  const int64_t h = x.size(-2), w = x.size(-1);
  VOLT_CHECK(h > 0 && w > 0, op, ": x has shape ", x.shape_str(), "; expected non-empty spatial dims");
  AutocastGuard exact(false);  // an average: x's dtype, as PyTorch (matmul would otherwise be lowered)
  Tensor ph = averaging_matrix(h, output_size.first, x.dtype(), x.device());    // (OH, H)
  Tensor pw = averaging_matrix(w, output_size.second, x.dtype(), x.device());   // (OW, W)
  return matmul(matmul(ph, x), pw.t());
}

}  // namespace volt
