// scaled_dot_product_attention: argument checks, the mask's layout (AttnMaskGeom), and the fused masked, scaled
// softmax with its autograd formula. The two products are matmul; dropout is the dropout op. On CUDA, calls that
// cuDNN's fused SDPA can take go there instead (flash_attention below; kernels/sdpa_path.h says when); calls
// without weights or a learned mask that it does not take run in chunks of query rows
// (attention_chunked.cpp).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/flash_attention.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/sdpa_detail.h>
#include <volt/kernels/sdpa_path.h>
#include <volt/runtime/cuda_api.h>

namespace volt {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

DType acc_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

void check_input(const Tensor& t, const char* name, const char* layout) {
  VOLT_CHECK(t.defined(), kOp, ": ", name, " is undefined");
  VOLT_CHECK(is_floating(t.dtype()), kOp, ": ", name,
             " must be floating point (float32, float64, float16 or bfloat16), got ", dtype_name(t.dtype()));
  VOLT_CHECK(t.dim() >= 2, kOp, ": ", name, " must be ", layout, " (at least 2 dims), got shape ", t.shape_str());
}

Shape batch_dims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// a and b broadcast together (NumPy rules); the result in `out`.
bool try_broadcast(const Shape& a, const Shape& b, Shape& out) {
  const size_t n = std::max(a.size(), b.size());
  out.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    out[i] = x == 1 ? y : x;
  }
  return true;
}

// The row dims of `m` (a view expanded to `shape`, all but the last dim), with size-1 dims dropped and neighbours
// that step through memory evenly merged; the last dim's stride is the key stride.
bool mask_geometry(const Tensor& m, const Shape& shape, AttnMaskGeom& g) {
  g = AttnMaskGeom{};
  g.col_stride = m.stride(-1);
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    const int64_t size = shape[d], stride = m.stride(static_cast<int64_t>(d));
    if (size == 1) continue;
    if (g.ndim > 0 && g.stride[g.ndim - 1] == stride * size) {
      g.size[g.ndim - 1] *= size;
      g.stride[g.ndim - 1] = stride;
      continue;
    }
    if (g.ndim == AttnMaskGeom::kMaxDims) return false;
    g.size[g.ndim] = size;
    g.stride[g.ndim] = stride;
    ++g.ndim;
  }
  return true;
}

// masked_softmax in differentiable ops (its backward under create_graph differentiates this): masked keys get
// a huge negative logit, so their weight underflows to exactly 0, and are then multiplied by 0, which also zeroes
// rows with every key masked.
Tensor masked_softmax_composed(const Tensor& scores, const Tensor& mask, const Tensor& additive, bool causal,
                               double scale) {
  const DType dt = scores.dtype();
  Tensor z = mul(dt == DType::f16 || dt == DType::bf16 ? scores.to(DType::f32) : scores, scale);
  if (additive.defined()) z = add(z, additive.to(z.dtype()));
  const Shape& s = z.shape();
  const int64_t L = s[s.size() - 2], S = s.back();
  Tensor keep = ones(s, DType::boolean, z.device());
  if (mask.defined() && mask.dtype() == DType::boolean) keep = mask.expand(s);
  if (causal) {  // keep j <= i
    Tensor i = arange(L, DType::i64, z.device()).reshape({L, 1});
    Tensor j = arange(S, DType::i64, z.device()).reshape({1, S});
    Tensor lower = le(j, i);
    keep = where(lower, keep, zeros({}, DType::boolean, z.device()));
  }
  Tensor kf = keep.to(z.dtype());
  Tensor w = softmax(where(keep, z, full({}, -1e30, z.dtype(), z.device())), -1);
  return mul(w, kf).to(dt);
}

// softmax over the last dim of (scores * scale + additive mask), with keys outside a bool mask or the causal
// triangle at weight 0 and all-masked rows all 0. scores (..., L, S); mask undefined, bool or in the accumulation
// dtype, broadcastable to scores. Differentiable in scores and in an additive mask.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask, bool causal, double scale) {
  Tensor x = scores.detach().contiguous();
  const Shape shape = x.shape();
  const Device dev = x.device();
  AttnParams p;
  p.k_len = shape.back();
  p.q_len = shape[shape.size() - 2];
  p.rows = shape_numel(Shape(shape.begin(), shape.end() - 1));
  p.scale = scale;
  p.causal = causal;
  const Tensor mview = sdpa_detail::mask_view(mask, shape, p);
  Tensor out = empty(shape, x.dtype(), dev);
  if (out.numel() > 0) backend::call<&backend::AttentionKernels::attn_softmax_fwd>(dev, x.dtype(), out, x, mview, p);
  Tensor y = out.detach();
  const bool additive = p.mask == AttnMaskKind::Additive;
  const bool bias_grad = additive && mask.requires_grad();
  const Shape mask_shape = additive ? mask.shape() : Shape{};
  autograd::attach_differentiable(out, "ScaledDotProductAttentionBackward", {scores, additive ? mask : Tensor()},
                   [y, p, bias_grad, mask_shape, scores, mask](const std::vector<Tensor>& grads) {
                     if (autograd::create_graph_enabled())
                       return autograd::composite_backward(
                           {scores, p.mask == AttnMaskKind::Additive ? mask : Tensor()}, grads,
                           [&](const std::vector<Tensor>& in) {
                             return std::vector<Tensor>{masked_softmax_composed(in[0], mask, in[1], p.causal, p.scale)};
                           });
                     const Device d = y.device();
                     Tensor g = grads[0].dtype() == y.dtype() ? grads[0].contiguous() : grads[0].to(y.dtype()).contiguous();
                     Tensor gs = empty(y.shape(), y.dtype(), d);
                     Tensor gb = bias_grad ? empty(y.shape(), acc_dtype(y.dtype()), d) : Tensor();
                     if (y.numel() > 0)
                       backend::call<&backend::AttentionKernels::attn_softmax_bwd>(d, y.dtype(), gs, gb, g, y, p);
                     if (gb.defined()) gb = sum_to(gb, mask_shape);
                     return std::vector<Tensor>{gs, gb};
                   });
  return out;
}

}  // namespace

Tensor sdpa_detail::mask_view(const Tensor& mask, const Shape& shape, AttnParams& p) {
  if (!mask.defined()) return Tensor();
  p.mask = mask.dtype() == DType::boolean ? AttnMaskKind::Keep : AttnMaskKind::Additive;
  Tensor view = mask.detach().expand(shape);
  if (!mask_geometry(view, shape, p.geom)) {  // too many uneven dims: one contiguous copy has one row dim
    view = view.contiguous();
    mask_geometry(view, shape, p.geom);
  }
  return view;
}

std::pair<Tensor, Tensor> sdpa_detail::fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Tensor& mask, double dropout_p, bool is_causal,
                                                       double sc, Generator* gen, const Tensor& dropout_scale) {
  Tensor scores = matmul(q, k.transpose(-2, -1));  // (batch(q, k)..., L, S)
  if (mask.defined()) {  // a mask with batch dims that only v has: the scores take them too
    Shape b;
    try_broadcast(scores.shape(), mask.shape(), b);
    if (b != scores.shape()) scores = scores.expand(b);
  }
  Tensor weights = masked_softmax(scores, mask, is_causal, sc);
  if (dropout_scale.defined()) {  // in its (accumulation) dtype, rounded once, as the dropout kernel does
    weights = mul(weights.to(dropout_scale.dtype()), dropout_scale).to(weights.dtype());
  } else if (dropout_p > 0.0) {
    weights = dropout(weights, dropout_p, /*training=*/true, gen);
  }
  Tensor out = matmul(weights, v);  // (batch..., L, Ev)
  return {out, weights};
}

namespace {

using sdpa_detail::fused_attention;

// ---- which path ran (kernels/sdpa_path.h) ----
std::atomic<int64_t> g_cudnn_calls{0}, g_fused_calls{0}, g_chunked_calls{0};
std::mutex g_reason_mu;
std::string g_last_reason;

// Counts a call of Volt's path; on a CUDA device, also why cuDNN did not take it.
void note_fused(const Device& dev, const std::string& why) {
  g_fused_calls.fetch_add(1, std::memory_order_relaxed);
  if (!dev.is_cuda()) return;
  std::lock_guard<std::mutex> lock(g_reason_mu);
  g_last_reason = why;
}

// note_fused, and the undefined tensor that tells the caller to run Volt's path.
Tensor fall_back(const Device& dev, const std::string& why) {
  note_fused(dev, why);
  return Tensor();
}

// t's (b, h, s, d) view for cuDNN, after replacing t by a contiguous copy when cuDNN cannot read it as it is.
FlashAttnTensor flash_view(Tensor& t) {
  auto view = [](const Tensor& x) {
    return flash_attention_view(x.shape(), x.strides(), itemsize(x.dtype()),
                                reinterpret_cast<uintptr_t>(x.data_ptr()));
  };
  auto vw = view(t);
  if (!vw) {
    t = t.contiguous();
    vw = view(t);
  }
  if (!vw) {  // contiguous but at a misaligned offset into its storage
    t = t.clone();
    vw = view(t);
  }
  VOLT_ASSERT(vw.has_value(), "a fresh contiguous tensor has a cuDNN view");
  return *vw;
}

// scaled_dot_product_attention through cuDNN's fused SDPA (kernels/cuda/attention_cudnn.cu) with its backward, or
// an undefined tensor (the reason noted) when this call cannot or should not go there; q, k, v are checked and of
// one dtype. Under create_graph the backward differentiates Volt's path instead, whose second derivative exists.
Tensor flash_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, bool has_mask, double dropout_p,
                       bool is_causal, double sc) {
  const Device dev = q0.device();
  if (std::string why = sdpa_detail::cudnn_unavailable(dev); !why.empty()) return fall_back(dev, why);
  FlashAttnRequest r;
  r.dtype = q0.dtype();
  r.batch = shape_numel(batch_dims(q0));
  r.q_len = q0.size(-2);
  r.k_len = k0.size(-2);
  r.head_dim_qk = q0.size(-1);
  r.head_dim_v = v0.size(-1);
  r.batch_dims_match = batch_dims(q0) == batch_dims(k0) && batch_dims(q0) == batch_dims(v0);
  r.has_mask = has_mask;
  r.dropout_p = dropout_p;
  r.compute_capability = cuda_compute_capability(dev.index);
  if (std::string why = flash_attention_refusal(r); !why.empty()) return fall_back(dev, why);

  Tensor q = q0, k = k0, v = v0;
  FlashAttnParams p;
  p.q = flash_view(q);
  p.k = flash_view(k);
  p.v = flash_view(v);
  p.scale = sc;
  p.causal = is_causal;
  p.training = autograd::any_requires_grad({&q, &k, &v});
  Shape out_shape = batch_dims(q);
  out_shape.push_back(r.q_len);
  out_shape.push_back(r.head_dim_v);
  Tensor out = empty(out_shape, q.dtype(), dev);
  p.o = flash_view(out);
  const int64_t b = p.q.dim[0], h = p.q.dim[1];
  Tensor stats = p.training ? empty({b, h, r.q_len, 1}, DType::f32, dev) : Tensor();
  FlashAttnStatus status;
  backend::call<&backend::AttentionKernels::flash_attn_fwd>(dev, q.dtype(), out, stats, q.detach(), k.detach(),
                                                             v.detach(), p, &status);
  if (!status.refusal.empty()) return fall_back(dev, status.refusal);
  sdpa_detail::note_cudnn();
  if (!p.training) return out;
  Tensor o = out.detach();
  autograd::attach_differentiable(
      out, "ScaledDotProductAttentionBackward", {q, k, v}, [q, k, v, o, stats, p](const std::vector<Tensor>& grads) {
        if (autograd::create_graph_enabled())
          return autograd::composite_backward({q, k, v}, grads, [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{
                fused_attention(in[0], in[1], in[2], Tensor(), 0.0, p.causal, p.scale, nullptr).first};
          });
        const Device d = o.device();
        Tensor g = sdpa_detail::flash_grad_input(grads[0], o.dtype());
        Tensor dq = empty(q.shape(), q.dtype(), d), dk = empty(k.shape(), k.dtype(), d);
        Tensor dv = empty(v.shape(), v.dtype(), d);
        backend::call<&backend::AttentionKernels::flash_attn_bwd>(d, q.dtype(), dq, dk, dv, q.detach(), k.detach(),
                                                                   v.detach(), o, g, stats, p);
        return std::vector<Tensor>{dq, dk, dv};
      });
  return out;
}

std::pair<Tensor, Tensor> sdpa(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& attn_mask,
                               double dropout_p, bool is_causal, std::optional<double> scale, Generator* gen,
                               bool need_weights) {
  check_input(q0, "q", "(..., L, E)");
  check_input(k0, "k", "(..., S, E)");
  check_input(v0, "v", "(..., S, Ev)");
  VOLT_CHECK(q0.dtype() == k0.dtype() && q0.dtype() == v0.dtype(), kOp, ": q, k and v must have one dtype, got ",
             dtype_name(q0.dtype()), ", ", dtype_name(k0.dtype()), " and ", dtype_name(v0.dtype()),
             "; convert with .to(dtype)");
  VOLT_CHECK(q0.device() == k0.device() && q0.device() == v0.device(), kOp,
             ": q, k and v must be on one device, got ", q0.device().str(), ", ", k0.device().str(), " and ",
             v0.device().str(), "; move them with .to(device)");
  VOLT_CHECK(q0.size(-1) == k0.size(-1), kOp, ": q has shape ", q0.shape_str(), " and k has shape ", k0.shape_str(),
             "; expected the same embedding size E in the last dim (", q0.size(-1), " vs ", k0.size(-1), ")");
  VOLT_CHECK(k0.size(-2) == v0.size(-2), kOp, ": k has shape ", k0.shape_str(), " and v has shape ", v0.shape_str(),
             "; expected the same number of keys S in dim -2 (", k0.size(-2), " vs ", v0.size(-2), ")");
  Shape bqk, batch;
  VOLT_CHECK(try_broadcast(batch_dims(q0), batch_dims(k0), bqk) && try_broadcast(bqk, batch_dims(v0), batch), kOp,
             ": the batch dims (all but the last two) of q ", q0.shape_str(), ", k ", k0.shape_str(), " and v ",
             v0.shape_str(), " cannot be broadcast together");
  VOLT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p must be in [0, 1), got ", dropout_p);
  VOLT_CHECK(!scale || std::isfinite(*scale), kOp, ": scale must be a finite number, got ", scale ? *scale : 0.0);
  const int64_t L = q0.size(-2), S = k0.size(-2), E = q0.size(-1);
  Shape full = batch;  // (batch..., L, S): the shape the mask must broadcast to
  full.push_back(L);
  full.push_back(S);
  Tensor mask;
  if (attn_mask.defined()) {
    VOLT_CHECK(attn_mask.device() == q0.device(), kOp, ": attn_mask is on ", attn_mask.device().str(),
               " but q is on ", q0.device().str(), "; move it with .to(device)");
    VOLT_CHECK(attn_mask.dtype() == DType::boolean || is_floating(attn_mask.dtype()), kOp,
               ": attn_mask must be bool (true = attend) or floating point (added to the scores), got ",
               dtype_name(attn_mask.dtype()));
    Shape b;
    VOLT_CHECK(attn_mask.dim() <= static_cast<int64_t>(full.size()) && try_broadcast(attn_mask.shape(), full, b) &&
                   b == full,
               kOp, ": attn_mask has shape ", attn_mask.shape_str(), " but the attention scores have shape ",
               shape_to_string(full), " (batch..., L, S); expected a mask broadcastable to it");
    mask = attn_mask.dtype() == DType::boolean ? attn_mask : cast(attn_mask, acc_dtype(q0.dtype()));
  }

  Tensor q = q0, k = k0, v = v0;
  if (autocast_detail::wants_lower(q)) {  // the products in the half dtype; the softmax accumulates in fp32
    q = autocast_detail::lower(q);
    k = autocast_detail::lower(k);
    v = autocast_detail::lower(v);
  }
  const double sc = scale ? *scale : (E > 0 ? 1.0 / std::sqrt(static_cast<double>(E)) : 1.0);
  if (!need_weights) {
    Tensor out = flash_attention(q, k, v, mask.defined(), dropout_p, is_causal, sc);
    // A learned (additive, differentiable) mask keeps the whole path, whose backward forms its gradient.
    if (!out.defined() && !(mask.defined() && mask.requires_grad()))
      out = sdpa_detail::chunked_attention(q, k, v, mask, is_causal, sc, dropout_p, gen);
    if (out.defined()) return {out, Tensor()};
  } else {
    note_fused(q.device(), "the attention weights were asked for (cuDNN never forms them)");
  }
  return fused_attention(q, k, v, mask, dropout_p, is_causal, sc, gen);
}

}  // namespace

std::string sdpa_detail::cudnn_unavailable(const Device& dev) {
  if (!dev.is_cuda()) return "not a CUDA device";
  if (!backend::supported<&backend::AttentionKernels::flash_attn_fwd>(dev, DType::bf16))
    return "this build has no cuDNN SDPA (no cuDNN frontend headers at configure time)";
  const char* e = std::getenv("VOLT_DISABLE_CUDNN_SDPA");
  if (e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0) return "VOLT_DISABLE_CUDNN_SDPA is set";
  return {};
}

void sdpa_detail::note_cudnn() { g_cudnn_calls.fetch_add(1, std::memory_order_relaxed); }
void sdpa_detail::note_chunked() { g_chunked_calls.fetch_add(1, std::memory_order_relaxed); }

Tensor sdpa_detail::flash_grad_input(const Tensor& grad, DType dtype) {
  Tensor g = grad.dtype() == dtype ? grad.contiguous() : grad.to(dtype).contiguous();
  if (reinterpret_cast<uintptr_t>(g.data_ptr()) % 16 != 0) g = g.clone();  // a view at an odd offset
  return g;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale, Generator* gen) {
  trace::Range op_range(trace::Layer::op, kOp);
  return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, gen, /*need_weights=*/false).first;
}

std::pair<Tensor, Tensor> scaled_dot_product_attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                                                    const Tensor& attn_mask, double dropout_p,
                                                                    bool is_causal, std::optional<double> scale,
                                                                    Generator* gen) {
  trace::Range op_range(trace::Layer::op, kOp);
  return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, gen, /*need_weights=*/true);
}

SdpaStats sdpa_stats() {
  SdpaStats s;
  s.cudnn = g_cudnn_calls.load(std::memory_order_relaxed);
  s.fused = g_fused_calls.load(std::memory_order_relaxed);
  s.chunked = g_chunked_calls.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_reason_mu);
  s.last_fallback_reason = g_last_reason;
  return s;
}

void reset_sdpa_stats() {
  g_cudnn_calls.store(0, std::memory_order_relaxed);
  g_fused_calls.store(0, std::memory_order_relaxed);
  g_chunked_calls.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_reason_mu);
  g_last_reason.clear();
}

std::string sdpa_path_summary(const SdpaStats& s) {
  if (s.cudnn > 0 && s.fused > 0) return "mixed";
  if (s.cudnn > 0) return "cudnn";
  return s.fused > 0 ? "fused" : "none";
}

bool cudnn_sdpa_built() {
  const backend::Backend* cuda = backend::table(DeviceType::CUDA);
  return cuda != nullptr && backend::family<backend::AttentionKernels>(*cuda).flash_attn_fwd.fn != nullptr;
}

}  // namespace volt
