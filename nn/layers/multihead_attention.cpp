#include <volt/nn/layers/multihead_attention.h>

#include <cmath>
#include <limits>
#include <sstream>

#include <volt/nn/init.h>

namespace volt::nn {

namespace {

constexpr const char* kName = "MultiheadAttention";

int64_t checked_embed_dim(int64_t embed_dim, int64_t num_heads) {
  VOLT_CHECK(embed_dim > 0, kName, ": embed_dim must be positive, got ", embed_dim);
  VOLT_CHECK(num_heads > 0, kName, ": num_heads must be positive, got ", num_heads);
  VOLT_CHECK(embed_dim % num_heads == 0, kName, ": embed_dim (", embed_dim, ") must be divisible by num_heads (",
             num_heads, ")");
  return embed_dim;
}

// PyTorch's bool masks say "masked out"; scaled_dot_product_attention's say "attend". Floating masks are added in
// both, so they pass unchanged.
Tensor to_keep(const Tensor& m) { return m.dtype() == DType::boolean ? eq(m, 0.0) : m; }

// One mask from two (either may be undefined): bool and bool stay bool (both must keep); otherwise additive.
Tensor combine_masks(const Tensor& a, const Tensor& b, DType dtype) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  if (a.dtype() == DType::boolean && b.dtype() == DType::boolean) return where(a, b, a);
  auto additive = [&](const Tensor& m) {
    if (m.dtype() != DType::boolean) return m;
    return where(m, zeros({}, dtype, m.device()), full({}, -std::numeric_limits<double>::infinity(), dtype, m.device()));
  };
  return add(additive(a), additive(b));
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, double p, bool bias, bool bf)
    : embed_dim(checked_embed_dim(e, h)),
      num_heads(h),
      head_dim(e / h),
      dropout(p),
      batch_first(bf),
      out_proj(e, e, bias) {
  VOLT_CHECK(p >= 0.0 && p < 1.0, kName, ": dropout must be in [0, 1), got ", p);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  if (bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  register_module("out_proj", out_proj);
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  out_proj.reset_parameters();
  if (out_proj.bias.defined()) init::zeros_(out_proj.bias);
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x, Tensor(), false).first; }

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask, bool average_attn_weights,
                                                      bool is_causal) {
  const int64_t E = embed_dim, H = num_heads;
  VOLT_CHECK(query.defined() && key.defined() && value.defined(), kName, ": query, key and value must be defined");
  const int64_t nd = query.dim();
  const char* layout = batch_first ? "(N, L, E) / (N, S, E) with batch_first, or unbatched (L, E) / (S, E)"
                                   : "(L, N, E) / (S, N, E), or unbatched (L, E) / (S, E)";
  VOLT_CHECK((nd == 2 || nd == 3) && key.dim() == nd && value.dim() == nd, kName, ": query ", query.shape_str(),
             ", key ", key.shape_str(), " and value ", value.shape_str(), " must all be ", layout);
  VOLT_CHECK(query.size(-1) == E && key.size(-1) == E && value.size(-1) == E, kName, ": query ", query.shape_str(),
             ", key ", key.shape_str(), " and value ", value.shape_str(), " must end in embed_dim=", E);
  const bool batched = nd == 3;
  // Work in (N, L, E).
  auto to_nle = [&](const Tensor& t) { return !batched ? t.unsqueeze(0) : (batch_first ? t : t.transpose(0, 1)); };
  Tensor q = to_nle(query), k = to_nle(key), v = to_nle(value);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  VOLT_CHECK(k.size(0) == N && v.size(0) == N && v.size(1) == S, kName, ": query ", query.shape_str(), ", key ",
             key.shape_str(), " and value ", value.shape_str(), " disagree on the batch size or on S (key and value ",
             "must have the same number of positions); expected ", layout);

  // Masks, as scaled_dot_product_attention masks broadcastable to (N, H, L, S).
  Tensor kpm, am;
  if (key_padding_mask.defined()) {
    const Shape want = batched ? Shape{N, S} : Shape{S};
    VOLT_CHECK(key_padding_mask.shape() == want, kName, ": key_padding_mask has shape ", key_padding_mask.shape_str(),
               "; expected ", shape_to_string(want), batched ? " (N, S)" : " (S)");
    kpm = to_keep(key_padding_mask).reshape({N, 1, 1, S});
  }
  if (attn_mask.defined()) {
    const Shape per_head = batched ? Shape{N * H, L, S} : Shape{H, L, S};
    VOLT_CHECK(attn_mask.shape() == Shape({L, S}) || attn_mask.shape() == per_head, kName, ": attn_mask has shape ",
               attn_mask.shape_str(), "; expected (L, S) = ", shape_to_string({L, S}), " or ",
               batched ? "(N * num_heads, L, S) = " : "(num_heads, L, S) = ", shape_to_string(per_head));
    am = to_keep(attn_mask);
    if (am.dim() == 3) am = am.reshape({N, H, L, S});
  }
  Tensor mask = combine_masks(am, kpm, q.dtype() == DType::f64 ? DType::f64 : DType::f32);

  // Projections: one GEMM for self-attention, three otherwise.
  Tensor qp, kp, vp;
  const Tensor& w = in_proj_weight;
  const Tensor& b = in_proj_bias;
  auto part = [&](const Tensor& t, int64_t i) { return t.defined() ? t.narrow(0, i * E, E) : Tensor(); };
  if (query.is_same(key) && key.is_same(value)) {
    Tensor qkv = linear(q, w, b);  // (N, L, 3E)
    qp = qkv.narrow(2, 0, E);
    kp = qkv.narrow(2, E, E);
    vp = qkv.narrow(2, 2 * E, E);
  } else {
    qp = linear(q, part(w, 0), part(b, 0));
    kp = linear(k, part(w, 1), part(b, 1));
    vp = linear(v, part(w, 2), part(b, 2));
  }
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({N, len, H, head_dim}).transpose(1, 2); };
  const double p = is_training() ? dropout : 0.0;
  Tensor out, weights;
  if (need_weights) {
    std::tie(out, weights) =
        scaled_dot_product_attention_with_weights(heads(qp, L), heads(kp, S), heads(vp, S), mask, p, is_causal);
  } else {
    out = scaled_dot_product_attention(heads(qp, L), heads(kp, S), heads(vp, S), mask, p, is_causal);
  }
  out = out_proj(out.transpose(1, 2).reshape({N, L, E}));  // (N, L, E)
  out = !batched ? out.squeeze(0) : (batch_first ? out : out.transpose(0, 1));
  if (weights.defined()) {
    if (average_attn_weights) weights = mean(weights, {1});  // (N, L, S)
    if (!batched) weights = weights.squeeze(0);
  }
  return {out, weights};
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim << ", num_heads=" << num_heads << ", dropout=" << dropout
     << ", bias=" << (in_proj_bias.defined() ? "true" : "false") << ", batch_first=" << (batch_first ? "true" : "false");
  return os.str();
}

}  // namespace volt::nn
