// causal_self_attention_packed (kernels/attention_packed.h): cuDNN's fused SDPA with strided q, k, v, out and
// gradients laid over the (B, T, 3C) projection and the (B, T, C) output, else the composition of views and
// scaled_dot_product_attention it is defined by. How the cuDNN call is made follows flash_attention in
// attention_ops.cpp; the kernels are kernels/cuda/attention_cudnn.cu.
#include <cmath>
#include <string>

#include <volt/kernels/attention_packed.h>
#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/flash_attention.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/autocast_util.h>
#include <volt/kernels/ops/sdpa_detail.h>
#include <volt/runtime/cuda_api.h>

namespace volt {

namespace {

constexpr const char* kOp = "causal_self_attention_packed";

// Part i (0: q, 1: k, 2: v) of qkv (B, T, 3C) as (B, H, T, D) heads: a view.
Tensor heads(const Tensor& qkv, int64_t i, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  return qkv.narrow(2, i * C, C).reshape({B, T, n_head, C / n_head}).transpose(1, 2);
}

// The definition: what GPT2Attention ran before this op.
Tensor composed(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  Tensor y = scaled_dot_product_attention(heads(qkv, 0, n_head), heads(qkv, 1, n_head), heads(qkv, 2, n_head),
                                          Tensor(), 0.0, /*is_causal=*/true);  // (B, H, T, D)
  return y.transpose(1, 2).reshape({B, T, C});
}

std::optional<FlashAttnTensor> cudnn_view(const Tensor& t) {
  return flash_attention_view(t.shape(), t.strides(), itemsize(t.dtype()), reinterpret_cast<uintptr_t>(t.data_ptr()));
}

// The op through cuDNN's fused SDPA, or an undefined tensor when cuDNN cannot or will not take it (nothing noted:
// the composition then tries it its own way and notes why it falls back). qkv is checked and autocast-lowered.
Tensor flash(const Tensor& qkv0, int64_t n_head) {
  const Device dev = qkv0.device();
  if (!sdpa_detail::cudnn_unavailable(dev).empty()) return Tensor();
  const int64_t B = qkv0.size(0), T = qkv0.size(1), C = qkv0.size(2) / 3, D = C / n_head;
  FlashAttnRequest r;
  r.dtype = qkv0.dtype();
  r.batch = B * n_head;
  r.q_len = r.k_len = T;
  r.head_dim_qk = r.head_dim_v = D;
  r.compute_capability = cuda_compute_capability(dev.index);
  if (!flash_attention_refusal(r).empty()) return Tensor();

  Tensor qkv = qkv0.contiguous();  // a no-op for a linear layer's output
  Tensor x = qkv.detach();
  Tensor q = heads(x, 0, n_head), k = heads(x, 1, n_head), v = heads(x, 2, n_head);
  Tensor out = empty({B, T, C}, qkv.dtype(), dev);
  auto qv = cudnn_view(q), kv = cudnn_view(k), vv = cudnn_view(v);
  auto ov = cudnn_view(out.reshape({B, T, n_head, D}).transpose(1, 2));
  if (!qv || !kv || !vv || !ov) return Tensor();  // qkv's storage offset is not 16-byte aligned
  FlashAttnParams p;
  p.q = *qv;
  p.k = *kv;
  p.v = *vv;
  p.o = *ov;  // dO (the incoming (B, T, C) gradient, made contiguous) has out's layout: p.d_o unset
  p.scale = 1.0 / std::sqrt(static_cast<double>(D));
  p.causal = true;
  p.training = autograd::any_requires_grad({&qkv});
  if (p.training) {  // dq, dk, dv into one (B, T, 3C) gradient laid out as qkv
    p.dq = p.q;
    p.dk = p.k;
    p.dv = p.v;
  }
  Tensor stats = p.training ? empty({B, n_head, T, 1}, DType::f32, dev) : Tensor();
  FlashAttnStatus status;
  backend::call<&backend::AttentionKernels::flash_attn_fwd>(dev, qkv.dtype(), out, stats, q, k, v, p, &status);
  if (!status.refusal.empty()) return Tensor();
  sdpa_detail::note_cudnn();
  if (!p.training) return out;
  Tensor o = out.detach();
  autograd::attach_differentiable(
      out, "CausalSelfAttentionPackedBackward", {qkv}, [qkv, o, stats, p, n_head](const std::vector<Tensor>& grads) {
        if (autograd::create_graph_enabled())
          return autograd::composite_backward({qkv}, grads, [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{composed(in[0], n_head)};
          });
        const Device d = o.device();
        Tensor g = sdpa_detail::flash_grad_input(grads[0], o.dtype());
        Tensor x = qkv.detach();
        Tensor dx = empty(x.shape(), x.dtype(), d);  // cuDNN writes every element: dq, dk, dv tile it
        backend::call<&backend::AttentionKernels::flash_attn_bwd>(
            d, x.dtype(), heads(dx, 0, n_head), heads(dx, 1, n_head), heads(dx, 2, n_head), heads(x, 0, n_head),
            heads(x, 1, n_head), heads(x, 2, n_head), o, g, stats, p);
        return std::vector<Tensor>{dx};
      });
  return out;
}

}  // namespace

Tensor causal_self_attention_packed(const Tensor& qkv, int64_t n_head) {
  trace::Range op_range(trace::Layer::op, kOp);
  VOLT_CHECK(qkv.defined(), kOp, ": qkv is undefined");
  VOLT_CHECK(is_floating(qkv.dtype()), kOp, ": qkv must be floating point (float32, float64, float16 or bfloat16), got ",
             dtype_name(qkv.dtype()));
  VOLT_CHECK(n_head >= 1, kOp, ": n_head must be at least 1, got ", n_head);
  VOLT_CHECK(qkv.dim() == 3, kOp, ": qkv must be (B, T, 3C) (3 dims), got shape ", qkv.shape_str());
  VOLT_CHECK(qkv.size(2) % (3 * n_head) == 0, kOp, ": qkv has shape ", qkv.shape_str(), "; its last dim (",
             qkv.size(2), ") must be 3 * C with C a multiple of n_head = ", n_head, " (a multiple of ", 3 * n_head,
             ")");
  if (qkv.numel() > 0) {
    Tensor out = flash(autocast_detail::lower(qkv), n_head);  // f16/bf16 under autocast, as in the composition
    if (out.defined()) return out;
  }
  return composed(qkv, n_head);
}

}  // namespace volt
