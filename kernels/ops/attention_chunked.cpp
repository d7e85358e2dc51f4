// Volt's own attention for calls without weights, and without a mask or with one that needs no gradient
// (scaled_dot_product_attention's path wherever cuDNN's fused SDPA does not run, and through it
// causal_self_attention_packed's): the scores, the fused softmax, dropout and the products a chunk of query rows at
// a time, so no (batch..., L, S) tensor outlives a chunk. The backward keeps only q, k, v (and the mask) and
// recomputes each chunk's weights, and its dropout from the same Philox counters. Under is_causal a chunk's products
// stop at the key of its last query (keys past it have weight 0).
#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include <volt/kernels/backend/attention.h>
#include <volt/kernels/backend/dropout.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/gemm_util.h>
#include <volt/kernels/ops/philox_draw.h>
#include <volt/kernels/ops/sdpa_detail.h>
#include <volt/kernels/sdpa_path.h>

namespace volt {

namespace {

using linalg_detail::gemm_into;

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr int64_t kDefaultChunkBytes = int64_t{256} << 20;
std::atomic<int64_t> g_chunk_bytes{kDefaultChunkBytes};

// One call's shapes, with q, k, v, out as (n, l, e), (n, s, e), (n, s, ev), (n, l, ev): n the product of the
// batch dims. Fixed at the forward, so the backward recomputes the forward's chunks exactly.
struct Chunks {
  int64_t n = 0, l = 0, s = 0, e = 0, ev = 0;
  int64_t rows = 0;  // query rows per chunk (the last may have fewer)
  DType dtype = DType::f32;
  Device device;
  bool causal = false;
  double scale = 1.0;
  Shape batch;  // the batch dims n is the product of
  Tensor mask;  // undefined, bool or additive (no gradient), broadcastable to (batch..., l, s)
  double dropout_p = 0.0;
  PhiloxArgs rng;  // the call's draw, when dropout_p > 0: each chunk's (n, c, keys) weights take the next counters

  // Calls f(r0, c, keys) for each chunk of queries [r0, r0 + c), in order, with the keys it sees.
  template <class F>
  void each(F&& f) const {
    for (int64_t r0 = 0; r0 < l; r0 += rows) {
      const int64_t c = std::min(rows, l - r0);
      f(r0, c, keys(r0, c));
    }
  }
  // Philox counters of the chunks before row r0 (of all of them for r0 = l): four weights each.
  uint64_t counters_before(int64_t r0) const {
    uint64_t total = 0;
    each([&](int64_t r, int64_t c, int64_t k) {
      if (r < r0) total += static_cast<uint64_t>(n * c * k + 3) / 4;
    });
    return total;
  }

  // Keys that queries [r0, r0 + c) see: all S, or under causal the first r0 + c (key j is kept for query i when
  // j <= i).
  int64_t keys(int64_t r0, int64_t c) const { return causal ? std::min(s, r0 + c) : s; }
  // The fused softmax's parameters for the chunk of queries [r0, r0 + c) in p, and the mask's view over the chunk's
  // (batch..., c, keys) scores (undefined without a mask, or when !with_mask: the backward reads no mask).
  Tensor softmax(int64_t r0, int64_t c, AttnParams& p, bool with_mask = true) const {
    p = AttnParams{};
    p.rows = n * c;
    p.q_len = c;
    p.q_offset = r0;
    p.k_len = keys(r0, c);
    p.scale = scale;
    p.causal = causal;
    if (!mask.defined() || !with_mask) return Tensor();
    Shape full = batch, part = batch;
    full.insert(full.end(), {l, s});
    part.insert(part.end(), {c, p.k_len});
    return sdpa_detail::mask_view(mask.expand(full).narrow(-2, r0, c).narrow(-1, 0, p.k_len), part, p);
  }
  // A buffer that holds any chunk's scores (of `dt`: the weights' dtype by default).
  Tensor buffer(std::optional<DType> dt = std::nullopt) const {
    return empty({n * rows * s}, dt.value_or(dtype), device);
  }
  // The first n * c * keys elements of `buf` as a contiguous (n, c, keys) tensor.
  Tensor view(const Tensor& buf, int64_t c, int64_t keys) const {
    return buf.narrow(0, 0, n * c * keys).reshape({n, c, keys});
  }
};

// Query rows per chunk: as many as keep one chunk's (n, rows, s) scores within sdpa_chunk_bytes(), spread evenly;
// under causal also at most max(kCausalMinRows, l / kCausalChunks), since each chunk skips the keys past its last
// query: 8 chunks do 56 % of the whole square's products, one does all of them.
constexpr int64_t kCausalChunks = 8, kCausalMinRows = 64;
int64_t rows_per_chunk(int64_t n, int64_t l, int64_t s, DType dt, bool causal) {
  const int64_t row_bytes = std::max<int64_t>(1, n * s * static_cast<int64_t>(itemsize(dt)));
  int64_t most = std::max<int64_t>(1, g_chunk_bytes.load(std::memory_order_relaxed) / row_bytes);
  if (causal) most = std::min(most, std::max(kCausalMinRows, (l + kCausalChunks - 1) / kCausalChunks));
  const int64_t chunks = (l + most - 1) / most;
  return (l + chunks - 1) / chunks;
}

// t (its batch dims..., rows, cols) broadcast to `batch` as a contiguous (n, rows, cols) tensor (a copy only when t
// is a strided view or broadcasts).
Tensor as3(const Tensor& t, const Shape& batch, int64_t n) {
  Shape full = batch;
  full.insert(full.end(), {t.size(-2), t.size(-1)});
  const Tensor x = t.detach();
  return (x.shape() == full ? x : x.expand(full)).contiguous().reshape({n, t.size(-2), t.size(-1)});
}

// The chunk of queries [r0, r0 + c): its weights (n, c, keys), written over its scores in `w`.
void chunk_weights(const Chunks& ch, const Tensor& q3, const Tensor& k3, int64_t r0, int64_t c, const Tensor& w) {
  const int64_t keys = ch.keys(r0, c);
  gemm_into(w, q3.narrow(1, r0, c), k3.narrow(1, 0, keys), false, false, /*tb=*/true);  // q k^T
  AttnParams p;
  const Tensor m = ch.softmax(r0, c, p);
  backend::call<&backend::AttentionKernels::attn_softmax_fwd>(ch.device, ch.dtype, w, w, m, p);
}

// Dropout over the chunk's weights w into `out` (w itself in the forward), its keep-mask into `keep`: the chunk's own
// counters of the call's draw, so the backward draws the forward's mask again.
void chunk_dropout(const Chunks& ch, int64_t r0, const Tensor& w, const Tensor& out, const Tensor& keep) {
  PhiloxArgs a = ch.rng;
  a.offset += ch.counters_before(r0);
  backend::call<&backend::DropoutKernels::dropout_fwd>(ch.device, w.dtype(), out, keep, w, a, ch.dropout_p);
}

// The forward's dropout over the whole (n, l, s) weights: 1 / (1 - p) where it kept a weight, 0 where it dropped one
// (and for keys past a causal chunk's last query, whose weights are 0), in the accumulation dtype (the forward
// scaled in it: a half 1 / (1 - p) would be off). Only a second derivative asks for it. The masks depend on the
// counters alone, not on the dtype.
Tensor dropout_scale(const Chunks& ch) {
  const DType acc = ch.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor scale = zeros({ch.n, ch.l, ch.s}, acc, ch.device);
  const Tensor buf = ch.buffer(acc), keep = ch.buffer(DType::boolean);
  ch.each([&](int64_t r0, int64_t c, int64_t keys) {
    Tensor part = ch.view(buf, c, keys);
    part.fill_(1.0);  // dropout of ones: the scale itself
    chunk_dropout(ch, r0, part, part, ch.view(keep, c, keys));
    Tensor dst = scale.narrow(1, r0, c).narrow(2, 0, keys);
    dst.copy_(part);
  });
  return scale;
}

Tensor forward(const Chunks& ch, const Tensor& q3, const Tensor& k3, const Tensor& v3) {
  Tensor out = empty({ch.n, ch.l, ch.ev}, ch.dtype, ch.device);
  const Tensor buf = ch.buffer(), keep = ch.dropout_p > 0.0 ? ch.buffer(DType::boolean) : Tensor();
  ch.each([&](int64_t r0, int64_t c, int64_t keys) {
    const Tensor w = ch.view(buf, c, keys);
    chunk_weights(ch, q3, k3, r0, c, w);
    if (keep.defined()) chunk_dropout(ch, r0, w, w, ch.view(keep, c, keys));
    gemm_into(out.narrow(1, r0, c), w, v3.narrow(1, 0, keys), false);  // weights v
  });
  return out;
}

// Which of q, k and v get a gradient.
struct Needs {
  bool q = true, k = true, v = true;
};

// dq, dk, dv (as (n, l, e), (n, s, e), (n, s, ev); undefined where not needed) from the output's gradient g3
// (n, l, ev). For half dtypes dk and dv sum over the chunks in f32 and are returned in f32 (the running sums are never
// rounded to half; the caller rounds once, after summing any broadcast batch dims).
std::vector<Tensor> backward(const Chunks& ch, const Tensor& q3, const Tensor& k3, const Tensor& v3, const Tensor& g3,
                             Needs need) {
  const bool half = ch.dtype == DType::f16 || ch.dtype == DType::bf16, scores_grad = need.q || need.k;
  const DType acc = half ? DType::f32 : ch.dtype;
  Tensor dq = need.q ? empty({ch.n, ch.l, ch.e}, ch.dtype, ch.device) : Tensor();
  Tensor dk = need.k ? zeros({ch.n, ch.s, ch.e}, acc, ch.device) : Tensor();
  Tensor dv = need.v ? zeros({ch.n, ch.s, ch.ev}, acc, ch.device) : Tensor();
  const bool drop = ch.dropout_p > 0.0;
  const Tensor wbuf = ch.buffer(), gbuf = scores_grad ? ch.buffer() : Tensor();
  const Tensor dbuf = drop ? ch.buffer() : Tensor(), kbuf = drop ? ch.buffer(DType::boolean) : Tensor();
  ch.each([&](int64_t r0, int64_t c, int64_t keys) {
    const Tensor w = ch.view(wbuf, c, keys), gc = g3.narrow(1, r0, c);
    chunk_weights(ch, q3, k3, r0, c, w);
    Tensor wd = w, keep;  // the weights after dropout, and its keep-mask
    if (drop) {
      wd = ch.view(dbuf, c, keys);
      keep = ch.view(kbuf, c, keys);
      chunk_dropout(ch, r0, w, wd, keep);
    }
    if (need.v) gemm_into(dv.narrow(1, 0, keys), wd, gc, true, /*ta=*/true);  // dv += wd^T g
    if (!scores_grad) return;
    const Tensor gw = ch.view(gbuf, c, keys);
    gemm_into(gw, gc, v3.narrow(1, 0, keys), false, false, /*tb=*/true);  // the dropped weights' gradient g v^T
    if (drop)  // through the dropout, in place
      backend::call<&backend::DropoutKernels::dropout_bwd>(ch.device, ch.dtype, gw, gw, keep,
                                                           1.0 / (1.0 - ch.dropout_p));
    // The scores' gradient (scale included), written over the weights' gradient (masked keys have weight 0 and
    // get 0: the backward reads no mask).
    AttnParams p;
    ch.softmax(r0, c, p, /*with_mask=*/false);
    backend::call<&backend::AttentionKernels::attn_softmax_bwd>(ch.device, ch.dtype, gw, Tensor(), gw, w, p);
    if (need.q) gemm_into(dq.narrow(1, r0, c), gw, k3.narrow(1, 0, keys), false);              // dq = ds k
    if (need.k) gemm_into(dk.narrow(1, 0, keys), gw, q3.narrow(1, r0, c), true, /*ta=*/true);  // dk += ds^T q
  });
  return {dq, dk, dv};
}

}  // namespace

Tensor sdpa_detail::chunked_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                      bool causal, double scale, double dropout_p, Generator* gen) {
  if (kernel_paths::disabled(kernel_paths::kChunkedAttention)) return Tensor();
  auto batch_of = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  // Batch dims that broadcast (k and v shared by q's heads, as in multi-query attention) run as copies expanded to
  // the common batch; their gradients are summed back.
  const Shape qk = broadcast_shapes(batch_of(q), batch_of(k), kOp), batch = broadcast_shapes(qk, batch_of(v), kOp);
  // Dropout acts on the weights, whose batch dims are q's and k's: one mask for every batch of v (the whole path).
  if (dropout_p > 0.0 && qk != batch) return Tensor();
  Chunks ch;
  ch.n = shape_numel(batch);
  ch.l = q.size(-2);
  ch.s = k.size(-2);
  ch.e = q.size(-1);
  ch.ev = v.size(-1);
  if (ch.n == 0 || ch.l == 0 || ch.s == 0 || ch.e == 0 || ch.ev == 0) return Tensor();
  ch.rows = rows_per_chunk(ch.n, ch.l, ch.s, q.dtype(), causal);
  ch.dtype = q.dtype();
  ch.device = q.device();
  ch.causal = causal;
  ch.scale = scale;
  ch.batch = batch;
  if (mask.defined()) ch.mask = mask.detach();
  ch.dropout_p = dropout_p;
  if (dropout_p > 0.0)
    ch.rng = philox_draw(gen ? *gen : default_generator(), ch.device, ch.counters_before(ch.l));
  sdpa_detail::note_chunked();

  Shape out_shape = batch;
  out_shape.push_back(ch.l);
  out_shape.push_back(ch.ev);
  Tensor out = forward(ch, as3(q, batch, ch.n), as3(k, batch, ch.n), as3(v, batch, ch.n)).reshape(out_shape);
  if (!autograd::any_requires_grad({&q, &k, &v})) return out;
  const Needs need{q.requires_grad(), k.requires_grad(), v.requires_grad()};
  autograd::attach_differentiable(
      out, "ScaledDotProductAttentionBackward", {q, k, v}, [q, k, v, ch, need](const std::vector<Tensor>& grads) {
        if (autograd::create_graph_enabled()) {  // the whole path, with the forward's dropout
          Shape full = ch.batch;
          full.insert(full.end(), {ch.l, ch.s});
          const Tensor drop = ch.dropout_p > 0.0 ? dropout_scale(ch).reshape(full) : Tensor();
          return autograd::composite_backward({q, k, v}, grads, [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{sdpa_detail::fused_attention(in[0], in[1], in[2], ch.mask, 0.0, ch.causal,
                                                                    ch.scale, nullptr, drop)
                                           .first};
          });
        }
        Tensor g = grads[0].dtype() == ch.dtype ? grads[0] : grads[0].to(ch.dtype);
        const Shape& b = ch.batch;
        std::vector<Tensor> d =
            backward(ch, as3(q, b, ch.n), as3(k, b, ch.n), as3(v, b, ch.n), as3(g, b, ch.n), need);
        const Tensor* in[] = {&q, &k, &v};
        for (size_t i = 0; i < d.size(); ++i) {
          if (!d[i].defined()) continue;
          Shape full = b;
          full.insert(full.end(), {d[i].size(1), d[i].size(2)});
          d[i] = sum_to(d[i].reshape(full), in[i]->shape());  // a reshape when nothing broadcast
          if (d[i].dtype() != ch.dtype) d[i] = d[i].to(ch.dtype);
        }
        return d;
      });
  return out;
}

void set_sdpa_chunk_bytes(int64_t bytes) {
  g_chunk_bytes.store(bytes > 0 ? bytes : kDefaultChunkBytes, std::memory_order_relaxed);
}

int64_t sdpa_chunk_bytes() { return g_chunk_bytes.load(std::memory_order_relaxed); }

}  // namespace volt
