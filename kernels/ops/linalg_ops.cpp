// matmul and linear: argument checks, operand layout (transposed views become GEMM transpose flags rather
// than copies), and their autograd formulas.
#include <atomic>
#include <tuple>
#include <utility>

#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/bias_act.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/derivatives.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/gemm_util.h>

namespace volt {

namespace {

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_small_gemm{true};

// How one matrix operand (batch..., rows, cols) is laid out for the GEMM.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// The single stride that walks all batch dims [0, nb) in row-major order, or -1 when there is none.
int64_t batch_stride_of(const Tensor& t, int64_t nb) {
  int64_t stride = 0, inner = -1;  // inner: index of the innermost non-trivial batch dim seen so far
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (inner < 0) {
      stride = t.stride(d);
    } else if (t.stride(d) != t.stride(inner) * t.size(inner)) {
      return -1;
    }
    inner = d;
  }
  return stride;
}

bool describe(const Tensor& t, Operand& o) {
  const int64_t nd = t.dim(), r = t.size(-2), c = t.size(-1), s0 = t.stride(-2), s1 = t.stride(-1);
  if ((c == 1 || s1 == 1) && (r == 1 || s0 >= std::max<int64_t>(c, 1))) {
    o.trans = false;
    o.ld = r == 1 ? std::max<int64_t>(c, 1) : s0;
  } else if ((r == 1 || s0 == 1) && (c == 1 || s1 >= std::max<int64_t>(r, 1))) {
    o.trans = true;  // a transposed view of a row-major (cols, rows) matrix
    o.ld = c == 1 ? std::max<int64_t>(r, 1) : s1;
  } else {
    return false;
  }
  o.batch_stride = batch_stride_of(t, nd - 2);
  if (o.batch_stride < 0) return false;
  o.t = t;
  return true;
}

Operand operand(const Tensor& t) {
  Operand o;
  if (describe(t, o)) return o;
  bool ok = describe(t.detach().contiguous(), o);  // materialises odd strides and partly broadcast batch dims
  VOLT_ASSERT(ok, "a contiguous matrix must be describable");
  return o;
}

// One (unbatched, beta 0) product out (m, n) = op(A) (m, k) @ op(B) (k, n) of row-major operands.
GemmDesc gemm_desc(const Operand& A, const Operand& B, int64_t m, int64_t k, int64_t n) {
  GemmDesc d;
  d.m = m;
  d.k = k;
  d.n = n;
  d.trans_a = A.trans;
  d.trans_b = B.trans;
  d.lda = A.ld;
  d.ldb = B.ld;
  d.ldc = std::max<int64_t>(n, 1);
  d.allow_tf32 = g_allow_tf32.load(std::memory_order_relaxed);
  d.small_gemm = g_small_gemm.load(std::memory_order_relaxed);
  return d;
}

}  // namespace

namespace linalg_detail {

void gemm_into(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, bool ta, bool tb) {
  if (out.numel() == 0) return;
  if ((a.dtype() != out.dtype() || b.dtype() != out.dtype()) && !out.is_cuda()) {  // only CUDA's GEMM takes a mix
    gemm_into(out, a.detach().to(out.dtype()), b.detach().to(out.dtype()), accumulate, ta, tb);
    return;
  }
  if (backend::half_through_f32<&backend::LinalgKernels::gemm>(out.device(), out.dtype())) {
    // The CPU computes half-precision products in f32 and rounds once.
    Tensor o32 = accumulate ? out.to(DType::f32) : empty(out.shape(), DType::f32);
    gemm_into(o32, a.detach().to(DType::f32), b.detach().to(DType::f32), accumulate, ta, tb);
    Tensor dst = out;
    dst.copy_(o32);
    return;
  }
  // out's rows must have unit stride and its batch dims one stride past its last row (a contiguous out always does);
  // any other view (transposed, expanded, overlapping) goes through a contiguous copy.
  Operand C;
  const int64_t m_out = out.size(-2), n_out = out.size(-1);
  const bool batched = out.numel() > m_out * n_out;
  if (!describe(out, C) || C.trans || (batched && C.batch_stride < (m_out - 1) * C.ld + n_out)) {
    Tensor dst = out, tmp = accumulate ? out.contiguous() : empty(out.shape(), out.dtype(), out.device());
    gemm_into(tmp, a, b, accumulate, ta, tb);
    dst.copy_(tmp);
    return;
  }
  Operand A = operand(a), B = operand(b);
  // The same storage read the other way round is the transpose.
  if (ta) A.trans = !A.trans;
  if (tb) B.trans = !B.trans;
  GemmDesc d = gemm_desc(A, B, ta ? a.size(-1) : a.size(-2), ta ? a.size(-2) : a.size(-1),
                         tb ? b.size(-2) : b.size(-1));
  d.batch = out.numel() / (d.m * d.n);
  d.stride_a = A.batch_stride;
  d.stride_b = B.batch_stride;
  d.ldc = C.ld;  // out may be a view of rows of a larger matrix (a chunk of rows, or of a batch of them)
  d.stride_c = C.batch_stride;
  d.beta = accumulate ? 1.0 : 0.0;
  trace::count_flops(static_cast<uint64_t>(2 * d.m * d.n * d.k * d.batch));
  backend::call<&backend::LinalgKernels::gemm>(out.device(), out.dtype(), d, A.t, B.t, out);
}

}  // namespace linalg_detail

namespace {

using linalg_detail::gemm_into;

// A linear layer's weight and bias gradients through one kernel (gemm_bgrad): dW = dY^T @ X and db = the column
// sums of dY, both in dY's dtype. Undefined tensors when it does not take them (an empty product, operands of two
// dtypes, CPU half types, or f32 on a GPU, whose small products keep Volt's own GEMM): the caller then runs the
// product and the sum as before.
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& gy, const Tensor& x) {
  constexpr auto kBgrad = &backend::LinalgKernels::gemm_bgrad;
  const DType dt = gy.dtype();
  const bool half = dt == DType::f16 || dt == DType::bf16;
  if (gy.dim() != 2 || x.dim() != 2 || x.dtype() != dt || (gy.is_cuda() && !half) ||
      !backend::supported<kBgrad>(gy.device(), dt))
    return {};
  const int64_t rows = gy.size(0), outf = gy.size(1), in = x.size(1);
  if (rows == 0 || outf == 0 || in == 0) return {};
  const Tensor go = gy.detach().contiguous();
  const Operand A{go, /*trans=*/true, /*ld=*/outf, 0};  // dY (rows, outf) read as dY^T (outf, rows)
  const Operand B = operand(x.detach());
  const GemmDesc d = gemm_desc(A, B, outf, rows, in);
  Tensor dw = empty({outf, in}, dt, go.device()), db = empty({outf}, dt, go.device());
  trace::count_flops(static_cast<uint64_t>(2 * d.m * d.n * d.k));
  backend::call<kBgrad>(go.device(), dt, d, A.t, B.t, dw, db);
  return {dw, db};
}

// 2-D out (n, m) = op(a) @ op(b), for the linear layer's three products.
Tensor mm2(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t n = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1), m = tb ? b.size(0) : b.size(1);
  Tensor out = empty({n, m}, a.dtype(), a.device());
  if (k == 0) return out.zero_();
  gemm_into(out, a, b, false, ta, tb);
  return out;
}

// Non-differentiable batched product with broadcast batch dims; a, b have >= 2 dims.
Tensor mm_raw(const Tensor& a0, const Tensor& b0) {
  if (a0.dim() == 2 && b0.dim() == 2) {  // the common case, without batch-shape bookkeeping or detached copies
    Tensor out = empty({a0.size(0), b0.size(1)}, a0.dtype(), a0.device());
    if (a0.size(1) == 0) return out.zero_();
    gemm_into(out, a0, b0, false);
    return out;
  }
  Tensor a = a0.detach(), b = b0.detach();
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {a.size(-2), a.size(-1)});
  sb.insert(sb.end(), {b.size(-2), b.size(-1)});
  so.insert(so.end(), {a.size(-2), b.size(-1)});
  if (a.shape() != sa) a = a.expand(sa);
  if (b.shape() != sb) b = b.expand(sb);
  Tensor out = empty(so, a.dtype(), a.device());
  if (a.size(-1) == 0) return out.zero_();
  gemm_into(out, a, b, false);
  return out;
}

void check_pair(const Tensor& a, const Tensor& b, const char* op, const char* na, const char* nb) {
  VOLT_CHECK(a.defined() && b.defined(), op, ": ", a.defined() ? nb : na, " is undefined");
  VOLT_CHECK(a.device() == b.device(), op, ": ", na, " is on ", a.device().str(), " but ", nb, " is on ",
             b.device().str(), "; expected both on one device (move one with .to(device))");
  VOLT_CHECK(a.dtype() == b.dtype(), op, ": ", na, " has dtype ", dtype_name(a.dtype()), " but ", nb, " has dtype ",
             dtype_name(b.dtype()), "; expected the same floating dtype (cast one with .to(dtype))");
  VOLT_CHECK(is_floating(a.dtype()), op, ": expected floating-point operands but got ", dtype_name(a.dtype()));
}

Tensor transpose_last(const Tensor& t) { return t.transpose(-1, -2); }

// An optional bias (out) of a 2-D weight (out, in): same dtype and device, one value per output.
void check_bias(const Tensor& weight, const Tensor& bias, const char* op, const char* wname, const char* bname) {
  if (!bias.defined()) return;
  check_pair(weight, bias, op, wname, bname);
  const int64_t outf = weight.size(0);
  VOLT_CHECK(bias.dim() == 1 && bias.size(0) == outf, op, ": ", bname, " has shape ", bias.shape_str(), " but ", wname,
             " has shape ", weight.shape_str(), "; expected ", bname, " of shape ", shape_to_string({outf}));
}

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  check_pair(x, weight, "linear", "x", "weight");
  VOLT_CHECK(weight.dim() == 2, "linear: weight must be 2-D (out_features, in_features) but has shape ",
             weight.shape_str());
  VOLT_CHECK(x.dim() >= 1, "linear: x must have at least 1 dim (..., in_features) but is a scalar");
  const int64_t in = weight.size(1);
  VOLT_CHECK(x.size(-1) == in, "linear: x has shape ", x.shape_str(), " and weight has shape ", weight.shape_str(),
             "; expected x.size(-1) to equal in_features = weight.size(1) (", in, ")");
  check_bias(weight, bias, "linear", "weight", "bias");
  VOLT_CHECK(act == Activation::None || act == Activation::ReLU || act == Activation::GELU ||
                 act == Activation::GELUTanh,
             "linear: unknown activation ", static_cast<int>(act),
             "; expected Activation::None, ReLU, GELU or GELUTanh");
}

// out (rows, out_f), contiguous = act(x (rows, in) @ weight (out_f, in)^T + bias); pre, when defined, receives
// the pre-activation. One backend kernel (kernels/backend/linalg.h: linear_act_fwd).
void linear_into(const Tensor& out, const Tensor& pre, const Tensor& x, const Tensor& weight, const Tensor& bias,
                 Activation act) {
  if (out.numel() == 0) return;
  constexpr auto kFwd = &backend::LinalgKernels::linear_act_fwd;
  if (backend::half_through_f32<kFwd>(out.device(), out.dtype())) {
    // As gemm_into: the CPU computes half-precision layers in f32 and rounds once.
    Tensor o32 = empty(out.shape(), DType::f32, out.device());
    Tensor p32 = pre.defined() ? empty(pre.shape(), DType::f32, pre.device()) : Tensor();
    linear_into(o32, p32, x.detach().to(DType::f32), weight.detach().to(DType::f32),
                bias.defined() ? bias.detach().to(DType::f32) : Tensor(), act);
    Tensor dst = out;
    dst.copy_(o32);
    if (pre.defined()) {
      Tensor pd = pre;
      pd.copy_(p32);
    }
    return;
  }
  Operand A, B;
  if (x.size(1) == 0) {  // an empty product (the output is act(bias)): no layout to describe
    A = Operand{x, false, 1, 0};
    B = Operand{weight, true, 1, 0};
  } else {
    A = operand(x);
    B = operand(weight);
    B.trans = !B.trans;  // weight^T
  }
  const GemmDesc d = gemm_desc(A, B, x.size(0), x.size(1), weight.size(0));
  trace::count_flops(static_cast<uint64_t>(2 * d.m * d.n * d.k));
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  backend::call<kFwd>(out.device(), out.dtype(), d, A.t, B.t, b, out, pre, act);
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }
void set_cuda_small_gemm(bool enable) { g_small_gemm.store(enable); }
bool cuda_small_gemm() { return g_small_gemm.load(); }

Tensor matmul(const Tensor& a, const Tensor& b) {
  trace::Range op_range(trace::Layer::op, "matmul");
  if (autocast_detail::wants_lower(a) || autocast_detail::wants_lower(b))
    return matmul(autocast_detail::lower(a), autocast_detail::lower(b));
  check_pair(a, b, "matmul", "a", "b");
  VOLT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: expected operands with at least 1 dim but got shapes ",
             a.shape_str(), " and ", b.shape_str());
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  VOLT_CHECK(ka == kb, "matmul: a has shape ", a.shape_str(), " and b has shape ", b.shape_str(),
             "; expected a.size(-1) (", ka, ") to equal b.size(", b.dim() == 1 ? "0" : "-2", ") (", kb, ")");
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  if (a.dim() > 2 && b.dim() == 2) {
    // (..., n, k) @ (k, m): one GEMM over all rows instead of a batch of small ones.
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.size(1));
    return matmul(a.reshape({-1, ka}), b).view(out_shape);
  }
  Tensor out = mm_raw(a, b);
  if (!autograd::any_requires_grad({&a, &b})) return out;  // no closure to build on the inference path
  bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor sa = gb ? a : Tensor(), sb = ga ? b : Tensor();  // undetached: create_graph records through them
  Shape sha = a.shape(), shb = b.shape();
  autograd::attach_differentiable(out, "MatmulBackward", {a, b}, [=](const std::vector<Tensor>& g) {
    Tensor da, db;
    if (autograd::create_graph_enabled()) {  // the same products through the public (recorded) op
      if (ga) da = sum_to(matmul(g[0], transpose_last(sb)), sha);
      if (gb) db = sum_to(matmul(transpose_last(sa), g[0]), shb);
    } else if (sha.size() == 2 && shb.size() == 2) {  // no broadcast to undo, no transposed views to build
      if (ga) da = mm2(g[0], sb, false, true);
      if (gb) db = mm2(sa, g[0], true, false);
    } else {
      if (ga) da = sum_to(mm_raw(g[0], transpose_last(sb)), sha);
      if (gb) db = sum_to(mm_raw(transpose_last(sa), g[0]), shb);
    }
    return std::vector<Tensor>{da, db};
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear(x, weight, bias, Activation::None);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  trace::Range op_range(trace::Layer::op, "linear");
  if (autocast_detail::wants_lower(x) || autocast_detail::wants_lower(weight) || autocast_detail::wants_lower(bias))
    return linear(autocast_detail::lower(x), autocast_detail::lower(weight), autocast_detail::lower(bias), act);
  check_linear(x, weight, bias, act);
  const int64_t in = weight.size(1), outf = weight.size(0);
  if (x.dim() != 2) {
    Shape out_shape(x.shape().begin(), x.shape().end() - 1);
    out_shape.push_back(outf);
    return linear(x.reshape({-1, in}), weight, bias, act).view(out_shape);
  }
  const int64_t rows = x.size(0);
  const bool needs_grad = autograd::any_requires_grad({&x, &weight, &bias});
  Tensor out = empty({rows, outf}, x.dtype(), x.device());
  // The backward reads the output (ReLU) or the pre-activation (GELUs); the forward writes the latter only then.
  Tensor pre = needs_grad && biasact::saves_pre(act) ? empty({rows, outf}, x.dtype(), x.device()) : Tensor();
  linear_into(out, pre, x, weight, bias, act);
  if (!needs_grad) return out;
  bool gx = x.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  // Undetached (create_graph records through them); a GELU's second derivative recomputes the pre-activation
  // from all three.
  const bool gelu_act = act == Activation::GELU || act == Activation::GELUTanh;
  Tensor sx = gw || gelu_act ? x : Tensor(), sw = gx || gelu_act ? weight : Tensor();
  Tensor sbias = gelu_act ? bias : Tensor();
  Tensor saved = biasact::saves_out(act) ? out.detach() : pre;
  const char* name = act == Activation::None ? "LinearBackward" : "LinearActivationBackward";
  autograd::attach_differentiable(out, name, {x, weight, bias}, [=](const std::vector<Tensor>& g) {
    Tensor gp = g[0], dx, dw, db;  // gp: the gradient of the pre-activation, (rows, out)
    if (autograd::create_graph_enabled()) {  // the same formula in recorded ops
      if (act == Activation::ReLU) gp = mul(g[0], gt(saved, 0.0).to(g[0].dtype()));
      if (gelu_act) gp = mul(g[0], gelu_derivative(linear(sx, sw, sbias), act == Activation::GELUTanh));
      if (gb) db = sum(gp, {0});
      if (gx) dx = matmul(gp, sw);
      if (gw) dw = matmul(gp.transpose(0, 1), sx);
      return std::vector<Tensor>{dx, dw, db};
    }
    if (act == Activation::None) {
      if (gb && gw) std::tie(dw, db) = weight_and_bias_grads(g[0], sx);
      if (gb && !db.defined()) db = sum(g[0], {0});
    } else {
      // One pass: grad_pre = g * act'(saved) and the bias gradient (its column sums).
      Tensor go = g[0].contiguous();
      gp = gx || gw ? empty({rows, outf}, go.dtype(), go.device()) : Tensor();
      if (gb) db = empty({outf}, go.dtype(), go.device());
      backend::call<&backend::LinalgKernels::bias_act_bwd>(go.device(), go.dtype(), gp, db, go, saved, rows, outf,
                                                           act);
    }
    if (gx) dx = mm2(gp, sw.detach(), false, false);  // (rows, out) @ (out, in)
    if (gw && !dw.defined()) dw = mm2(gp, sx.detach(), true, false);  // (rows, out)^T @ (rows, in)
    return std::vector<Tensor>{dx, dw, db};
  });
  return out;
}

Tensor fused_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                 Activation act) {
  trace::Range op_range(trace::Layer::op, "fused_mlp");
  using autocast_detail::lower;
  using autocast_detail::wants_lower;
  if (wants_lower(x) || wants_lower(w1) || wants_lower(b1) || wants_lower(w2) || wants_lower(b2))
    return fused_mlp(lower(x), lower(w1), lower(b1), lower(w2), lower(b2), act);
  check_linear(x, w1, b1, act);
  VOLT_CHECK(w2.defined() && w2.dim() == 2 && w2.size(1) == w1.size(0), "fused_mlp: w2 has shape ",
             w2.defined() ? w2.shape_str() : std::string("undefined"), " but the hidden layer has ", w1.size(0),
             " features (w1 ", w1.shape_str(), "); expected w2 of shape (out, ", w1.size(0), ")");
  check_pair(w1, w2, "fused_mlp", "w1", "w2");
  check_bias(w2, b2, "fused_mlp", "w2", "b2");
  // Without a pre-activation to recompute from (no activation, ReLU), or without gradients, nothing is saved
  // that the composition would not save: the two layers as they are.
  if (!biasact::saves_pre(act) || !autograd::any_requires_grad({&x, &w1, &b1, &w2, &b2}))
    return linear(linear(x, w1, b1, act), w2, b2);
  const int64_t in = w1.size(1), hidden = w1.size(0), outf = w2.size(0);
  if (x.dim() != 2) {
    Shape out_shape(x.shape().begin(), x.shape().end() - 1);
    out_shape.push_back(outf);
    return fused_mlp(x.reshape({-1, in}), w1, b1, w2, b2, act).view(out_shape);
  }
  const int64_t rows = x.size(0);
  Tensor pre = empty({rows, hidden}, x.dtype(), x.device()), out;
  {
    Tensor h = empty({rows, hidden}, x.dtype(), x.device());  // freed here: the backward recomputes it
    linear_into(h, pre, x, w1, b1, act);
    out = empty({rows, outf}, x.dtype(), x.device());
    linear_into(out, Tensor(), h, w2, b2, Activation::None);
  }
  const bool gx = x.requires_grad(), gw1 = w1.requires_grad(), gb1 = b1.defined() && b1.requires_grad();
  const bool gw2 = w2.requires_grad(), gb2 = b2.defined() && b2.requires_grad();
  const GeluApproximate approx = act == Activation::GELUTanh ? GeluApproximate::Tanh : GeluApproximate::None;
  // x and the weights undetached: create_graph records the composition through them.
  autograd::attach_differentiable(out, "FusedMlpBackward", {x, w1, b1, w2, b2}, [=](const std::vector<Tensor>& g) {
    if (autograd::create_graph_enabled())
      return autograd::composite_backward({x, w1, b1, w2, b2}, g, [act](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{linear(linear(in[0], in[1], in[2], act), in[3], in[4])};
      });
    const Tensor go = g[0].contiguous();
    Tensor dx, dw1, db1, dw2, db2;
    if (gw2 || gb2) {
      const Tensor h = gw2 ? gelu(pre, approx) : Tensor();  // the hidden activation, recomputed from pre
      if (gw2 && gb2) std::tie(dw2, db2) = weight_and_bias_grads(go, h);
      if (gb2 && !db2.defined()) db2 = sum(go, {0});
      if (gw2 && !dw2.defined()) dw2 = mm2(go, h, true, false);
    }
    if (gx || gw1 || gb1) {
      // dpre = (go @ w2) * act'(pre), (rows, out) @ (out, hidden), and b1's gradient, its column sums.
      const Tensor dpre = empty({rows, hidden}, go.dtype(), go.device());
      if (gb1) db1 = empty({hidden}, go.dtype(), go.device());
      constexpr auto kBwd = &backend::LinalgKernels::matmul_act_bwd;
      // One kernel (on CUDA, one cuBLASLt matmul); empty products take the two ops (no operand layout to describe).
      if (rows > 0 && outf > 0 && backend::supported<kBwd>(go.device(), go.dtype())) {
        const Operand A = operand(go), B = operand(w2.detach());
        const GemmDesc d = gemm_desc(A, B, rows, outf, hidden);
        trace::count_flops(static_cast<uint64_t>(2 * d.m * d.n * d.k));
        backend::call<kBwd>(go.device(), go.dtype(), d, A.t, B.t, dpre, db1, pre, act);
      } else {  // the CPU's half types: the product (in f32, rounded once), then the activation's backward
        const Tensor dh = mm2(go, w2.detach(), false, false);
        backend::call<&backend::LinalgKernels::bias_act_bwd>(dh.device(), dh.dtype(), dpre, db1, dh, pre, rows,
                                                             hidden, act);
      }
      if (gx) dx = mm2(dpre, w1.detach(), false, false);
      if (gw1) dw1 = mm2(dpre, x.detach(), true, false);
    }
    return std::vector<Tensor>{dx, dw1, db1, dw2, db2};
  });
  return out;
}

}  // namespace volt
