// scaled_dot_product_attention (values against matmul + softmax, masks, fully masked rows, dropout, dtypes,
// finite-difference gradients, errors) and the layers built on it: nn::MultiheadAttention, nn::Residual and
// nn::TransformerEncoderLayer (PyTorch's parameter names, values against a composition of existing ops and
// submodules, masks, gradients of inputs and parameters, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::expect_param_gradients_match;
using volt::testing::rand_f64;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::string> names(const nn::StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [name, t] : sd) out.push_back(name);
  return out;
}

// A bool mask as the additive mask it means (0 where true, -inf where false), in f64.
Tensor additive_of(const Tensor& keep) { return where(keep, zeros({}, DType::f64), full({}, -kInf, DType::f64)); }

// tril(ones(L, S)): query i sees keys j <= i.
Tensor causal_keep(int64_t L, int64_t S) {
  return ge(arange(L).reshape({L, 1}), arange(S).reshape({1, S}));
}

// The reference: softmax(q k^T * scale + bias) composed of matmul and softmax (no fully masked rows here).
Tensor ref_weights(const Tensor& q, const Tensor& k, double scale, const Tensor& bias = Tensor()) {
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (bias.defined()) s = add(s, bias);
  return softmax(s, -1);
}

// A bool mask with about half true and at least one true per row of the last dim.
Tensor random_keep(const Shape& shape, uint64_t seed) {
  const int64_t S = shape.back();
  const int64_t rows = shape_numel(shape) / S;
  std::vector<uint8_t> v(static_cast<size_t>(shape_numel(shape)));
  std::vector<double> r = rand_f64(shape, seed).to_vector<double>();
  for (int64_t i = 0; i < rows; ++i)  // key (row mod S) always kept, so no row is empty
    for (int64_t j = 0; j < S; ++j) v[i * S + j] = r[i * S + j] > 0 || j == i % S;
  return from_vector<uint8_t>(v, shape).to(DType::boolean);
}

double max_abs(const Tensor& t) { return max(abs(t.to(DType::f64))).item(); }

}  // namespace

// ---- scaled_dot_product_attention: values ----------------------------------------------------------------------

TEST(Sdpa, MatchesMatmulSoftmaxReference) {
  Tensor q = rand_f64({2, 3, 4, 8}, 1), k = rand_f64({2, 3, 5, 8}, 2), v = rand_f64({2, 3, 5, 6}, 3);
  auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 4, 6}));
  EXPECT_EQ(w.shape(), (Shape{2, 3, 4, 5}));
  Tensor rw = ref_weights(q, k, 1.0 / std::sqrt(8.0));
  expect_close(w, rw.to_vector<double>(), 1e-12, 1e-12);
  expect_close(out, matmul(rw, v).to_vector<double>(), 1e-12, 1e-12);
  expect_close(scaled_dot_product_attention(q, k, v), out.to_vector<double>(), 0, 0);
  // An explicit scale, and rows summing to 1.
  Tensor o2 = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, 0.3);
  expect_close(o2, matmul(ref_weights(q, k, 0.3), v).to_vector<double>(), 1e-12, 1e-12);
  expect_close(sum(w, {-1}), std::vector<double>(24, 1.0), 1e-12, 0);
}

TEST(Sdpa, HandComputedSingleQuery) {
  // One query [1, 0] against keys [1, 0] and [0, 1] with scale 1: weights softmax([1, 0]).
  Tensor q = from_vector<double>({1, 0}, {1, 2}), k = from_vector<double>({1, 0, 0, 1}, {2, 2});
  Tensor v = from_vector<double>({10, 20}, {2, 1});
  auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, Tensor(), 0.0, false, 1.0);
  const double e = std::exp(1.0), w0 = e / (e + 1), w1 = 1 / (e + 1);
  expect_close(w, {w0, w1}, 1e-14, 0);
  expect_close(out, {10 * w0 + 20 * w1}, 1e-12, 0);
}

TEST(Sdpa, BatchDimsBroadcast) {
  // q (2, 1, 4, 8), k (3, 5, 8), v (1, 5, 6): batch (2, 3).
  Tensor q = rand_f64({2, 1, 4, 8}, 4), k = rand_f64({3, 5, 8}, 5), v = rand_f64({1, 5, 6}, 6);
  Tensor out = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 4, 6}));
  expect_close(out, matmul(ref_weights(q, k, 1.0 / std::sqrt(8.0)), v).to_vector<double>(), 1e-12, 1e-12);
  // 2-D inputs: one head, no batch.
  Tensor q2 = rand_f64({4, 8}, 7), k2 = rand_f64({5, 8}, 8), v2 = rand_f64({5, 3}, 9);
  expect_close(scaled_dot_product_attention(q2, k2, v2),
               matmul(ref_weights(q2, k2, 1.0 / std::sqrt(8.0)), v2).to_vector<double>(), 1e-12, 1e-12);
  // A mask with a batch dim only v has: the output takes it.
  Tensor q3 = rand_f64({4, 8}, 10), k3 = rand_f64({5, 8}, 11), v3 = rand_f64({2, 5, 3}, 12);
  Tensor m3 = rand_f64({2, 4, 5}, 13);
  expect_close(scaled_dot_product_attention(q3, k3, v3, m3),
               matmul(ref_weights(q3, k3, 1.0 / std::sqrt(8.0), m3), v3).to_vector<double>(), 1e-12, 1e-12);
  // A mask broadcast over every other of many batch dims: more uneven row dims than the kernel's geometry holds
  // (the op copies it once).
  Tensor q4 = rand_f64({2, 2, 2, 2, 2, 2, 3, 4}, 14), k4 = rand_f64({5, 4}, 15), v4 = rand_f64({5, 2}, 16);
  Tensor m4 = random_keep({2, 1, 2, 1, 2, 1, 3, 5}, 17);
  expect_close(scaled_dot_product_attention(q4, k4, v4, m4),
               matmul(ref_weights(q4, k4, 0.5, additive_of(m4)), v4).to_vector<double>(), 1e-12, 1e-12);
}

TEST(Sdpa, BoolMaskKeepsTrueEntries) {
  Tensor q = rand_f64({2, 3, 4, 8}, 21), k = rand_f64({2, 3, 5, 8}, 22), v = rand_f64({2, 3, 5, 6}, 23);
  const double sc = 1.0 / std::sqrt(8.0);
  // (L, S), (B, 1, 1, S) key-padding style, the full (B, H, L, S) and a non-contiguous (transposed) mask.
  std::vector<Tensor> masks = {random_keep({4, 5}, 24), random_keep({2, 1, 1, 5}, 25),
                               random_keep({2, 3, 4, 5}, 26), random_keep({5, 4}, 27).transpose(0, 1)};
  for (const Tensor& m : masks) {
    auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, m);
    Tensor rw = ref_weights(q, k, sc, additive_of(m));
    expect_close(w, rw.to_vector<double>(), 1e-12, 1e-12);
    expect_close(out, matmul(rw, v).to_vector<double>(), 1e-12, 1e-12);
    // Masked keys get exactly zero weight.
    Tensor masked_w = where(m, zeros({}, DType::f64), w);
    EXPECT_EQ(max_abs(masked_w), 0.0) << "mask " << m.shape_str();
  }
}

TEST(Sdpa, AdditiveMaskIsAddedToScaledScores) {
  Tensor q = rand_f64({2, 4, 8}, 31), k = rand_f64({2, 5, 8}, 32), v = rand_f64({2, 5, 6}, 33);
  const double sc = 1.0 / std::sqrt(8.0);
  Tensor bias = rand_f64({4, 5}, 34, -2, 2);
  expect_close(scaled_dot_product_attention(q, k, v, bias),
               matmul(ref_weights(q, k, sc, bias), v).to_vector<double>(), 1e-12, 1e-12);
  // A float32 mask with float64 inputs (cast to the accumulation type), and -inf entries masking.
  Tensor bias32 = bias.to(DType::f32);
  expect_close(scaled_dot_product_attention(q, k, v, bias32),
               matmul(ref_weights(q, k, sc, bias32.to(DType::f64)), v).to_vector<double>(), 1e-12, 1e-12);
  Tensor keep = random_keep({4, 5}, 35);
  expect_close(scaled_dot_product_attention(q, k, v, additive_of(keep)),
               scaled_dot_product_attention(q, k, v, keep).to_vector<double>(), 0, 0);
}

TEST(Sdpa, CausalIsTopLeftTriangle) {
  Tensor q = rand_f64({2, 5, 4}, 41), k = rand_f64({2, 5, 4}, 42), v = rand_f64({2, 5, 3}, 43);
  const double sc = 0.5;
  auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, Tensor(), 0.0, true, sc);
  Tensor rw = ref_weights(q, k, sc, additive_of(causal_keep(5, 5)));
  expect_close(w, rw.to_vector<double>(), 1e-12, 1e-12);
  expect_close(out, matmul(rw, v).to_vector<double>(), 1e-12, 1e-12);
  std::vector<double> wv = w.to_vector<double>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = i + 1; j < 5; ++j) EXPECT_EQ(wv[(b * 5 + i) * 5 + j], 0.0);
  // The first query sees only the first key: its output is v[0].
  expect_close(out.select(0, 0).select(0, 0), v.select(0, 0).select(0, 0).to_vector<double>(), 1e-12, 0);
  // L < S: still j <= i (PyTorch's tril(ones(L, S))).
  Tensor q2 = rand_f64({3, 4}, 44), k2 = rand_f64({6, 4}, 45), v2 = rand_f64({6, 2}, 46);
  expect_close(scaled_dot_product_attention(q2, k2, v2, Tensor(), 0.0, true),
               matmul(ref_weights(q2, k2, 0.5, additive_of(causal_keep(3, 6))), v2).to_vector<double>(), 1e-12,
               1e-12);
  // Causal combined with a mask: both apply.
  Tensor keep = random_keep({5, 5}, 47);
  Tensor both = where(keep, causal_keep(5, 5), keep);
  expect_close(scaled_dot_product_attention(q, k, v, keep, 0.0, true, sc),
               matmul(ref_weights(q, k, sc, additive_of(both)), v).to_vector<double>(), 1e-12, 1e-12);
}

TEST(Sdpa, FullyMaskedRowsGiveZerosNotNaN) {
  Tensor q = rand_f64({2, 3, 4}, 51), k = rand_f64({2, 4, 4}, 52), v = rand_f64({2, 4, 2}, 53);
  // Query 1 may attend to nothing (bool), query 2 has an all -inf additive row.
  Tensor keep = ones({3, 4}, DType::boolean);
  keep.select(0, 1).fill_(0.0);
  Tensor bias = zeros({3, 4}, DType::f64);
  bias.select(0, 2).fill_(-kInf);
  for (const Tensor& m : {keep, bias}) {
    auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, m);
    const int64_t row = m.dtype() == DType::boolean ? 1 : 2;
    for (double x : out.to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
    for (double x : w.to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
    EXPECT_EQ(max_abs(w.select(1, row)), 0.0);
    EXPECT_EQ(max_abs(out.select(1, row)), 0.0);
    // The other rows are the plain reference.
    Tensor rw = ref_weights(q, k, 0.5);
    const int64_t other = 0;
    expect_close(w.select(1, other), rw.select(1, other).to_vector<double>(), 1e-12, 1e-12);
  }
  // Every key masked everywhere; and no keys at all (S = 0).
  Tensor none = zeros({3, 4}, DType::boolean);
  EXPECT_EQ(max_abs(scaled_dot_product_attention(q, k, v, none)), 0.0);
  Tensor empty_k = zeros({2, 0, 4}, DType::f64), empty_v = zeros({2, 0, 2}, DType::f64);
  Tensor out0 = scaled_dot_product_attention(q, empty_k, empty_v);
  EXPECT_EQ(out0.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(max_abs(out0), 0.0);
  // Gradients through a fully masked row are zero, not NaN.
  Tensor qg = rand_f64({3, 4}, 54).set_requires_grad(), kg = rand_f64({4, 4}, 55).set_requires_grad();
  Tensor vg = rand_f64({4, 2}, 56).set_requires_grad();
  sum(scaled_dot_product_attention(qg, kg, vg, keep)).backward();
  for (const Tensor& t : {qg, kg, vg})
    for (double x : t.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
  EXPECT_EQ(max_abs(qg.grad().select(0, 1)), 0.0);
}

TEST(Sdpa, DropoutDropsWeightsAndScalesTheRest) {
  Tensor q = rand_f64({2, 6, 4}, 61), k = rand_f64({2, 7, 4}, 62), v = rand_f64({2, 7, 3}, 63);
  Tensor plain = ref_weights(q, k, 0.5);
  Generator g1(7), g2(7);
  auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, Tensor(), 0.5, false, std::nullopt, &g1);
  auto [out2, w2] = scaled_dot_product_attention_with_weights(q, k, v, Tensor(), 0.5, false, std::nullopt, &g2);
  EXPECT_EQ(w.to_vector<double>(), w2.to_vector<double>());  // same seed, same mask
  std::vector<double> wv = w.to_vector<double>(), pv = plain.to_vector<double>();
  int64_t dropped = 0;
  for (size_t i = 0; i < wv.size(); ++i) {
    if (wv[i] == 0.0) {
      ++dropped;
    } else {
      EXPECT_NEAR(wv[i], 2.0 * pv[i], 1e-12);
    }
  }
  EXPECT_GT(dropped, 10);
  EXPECT_LT(dropped, 74);
  expect_close(out, matmul(w, v).to_vector<double>(), 1e-12, 1e-12);
}

TEST(Sdpa, LowPrecisionDtypesMatchFloat64) {
  Tensor q = rand_f64({2, 5, 8}, 71), k = rand_f64({2, 6, 8}, 72), v = rand_f64({2, 6, 4}, 73);
  Tensor keep = random_keep({5, 6}, 74);
  for (bool causal : {false, true}) {
    Tensor ref = scaled_dot_product_attention(q, k, v, keep, 0.0, causal);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      Tensor out = scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), keep, 0.0, causal);
      EXPECT_EQ(out.dtype(), dt);
      const double tol = dt == DType::f32 ? 1e-5 : (dt == DType::f16 ? 5e-3 : 3e-2);
      expect_close(out, ref.to_vector<double>(), tol, tol);
    }
  }
}

// ---- scaled_dot_product_attention: gradients ------------------------------------------------------------------

TEST(SdpaGrad, QKVMatchFiniteDifferences) {
  auto in = [](const Shape& s, uint64_t seed) { return rand_f64(s, seed).set_requires_grad(); };
  // No mask; batch dims broadcasting.
  expect_gradients_match([](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
                         {in({2, 3, 4}, 81), in({2, 5, 4}, 82), in({2, 5, 3}, 83)});
  expect_gradients_match([](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
                         {in({2, 1, 3, 4}, 84), in({3, 4, 4}, 85), in({4, 2}, 86)});
  // Bool mask, causal, both; an explicit scale.
  Tensor keep = random_keep({3, 5}, 87);
  expect_gradients_match(
      [keep](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep); },
      {in({2, 3, 4}, 88), in({2, 5, 4}, 89), in({2, 5, 3}, 90)});
  expect_gradients_match(
      [](const std::vector<Tensor>& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.7);
      },
      {in({2, 4, 3}, 91), in({2, 4, 3}, 92), in({2, 4, 2}, 93)});
  Tensor keep4 = random_keep({2, 1, 4, 4}, 94);
  expect_gradients_match(
      [keep4](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep4, 0.0, true); },
      {in({2, 2, 4, 3}, 95), in({2, 2, 4, 3}, 96), in({2, 2, 4, 2}, 97)});
  // The weights output too.
  expect_gradients_match(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention_with_weights(x[0], x[1], x[2]).second; },
      {in({2, 3, 4}, 98), in({2, 5, 4}, 99), rand_f64({2, 5, 3}, 100)});
}

TEST(SdpaGrad, AdditiveMaskReceivesGradient) {
  auto in = [](const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
    return rand_f64(s, seed, lo, hi).set_requires_grad();
  };
  // A learned (L, S) bias broadcast over the batch, and one per batch element.
  expect_gradients_match(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
      {in({2, 3, 4}, 101), in({2, 5, 4}, 102), in({2, 5, 3}, 103), in({3, 5}, 104, -2, 2)});
  expect_gradients_match(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.0, true); },
      {in({2, 4, 3}, 105), in({2, 4, 3}, 106), in({2, 4, 2}, 107), in({2, 1, 4}, 108, -2, 2)});
  // A float32 bias with float64 inputs gets a float32 gradient.
  Tensor b32 = rand_f64({3, 5}, 109).to(DType::f32).set_requires_grad();
  sum(scaled_dot_product_attention(rand_f64({3, 4}, 110), rand_f64({5, 4}, 111), rand_f64({5, 2}, 112), b32))
      .backward();
  ASSERT_TRUE(b32.grad().defined());
  EXPECT_EQ(b32.grad().dtype(), DType::f32);
  EXPECT_EQ(b32.grad().shape(), (Shape{3, 5}));
}

// ---- scaled_dot_product_attention: errors ---------------------------------------------------------------------

TEST(SdpaErrors, NameTheProblem) {
  Tensor q = rand_f64({2, 3, 4}, 121), k = rand_f64({2, 5, 4}, 122), v = rand_f64({2, 5, 6}, 123);
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(Tensor(), k, v), "scaled_dot_product_attention", "q is undefined");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q.to(DType::i64), k, v), "q must be floating point", "int64");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k.to(DType::f32), v), "one dtype", "float64", "float32");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(rand_f64({4}, 1), k, v), "q must be (..., L, E)", "(4,)");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, rand_f64({2, 5, 3}, 1), v), "embedding size E", "(2, 3, 4)",
                    "(2, 5, 3)");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, rand_f64({2, 4, 6}, 1)), "number of keys S", "(2, 4, 6)");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, rand_f64({3, 5, 4}, 1), rand_f64({3, 5, 6}, 1)), "batch dims",
                    "cannot be broadcast");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, ones({3, 5}, DType::i64)), "attn_mask must be bool",
                    "int64");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, ones({3, 4}, DType::boolean)), "attn_mask has shape (3, 4)",
                    "(2, 3, 5)", "broadcastable");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, ones({2, 2, 3, 5}, DType::boolean)), "attn_mask has shape");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, Tensor(), 1.0), "dropout_p must be in [0, 1)", "1");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, Tensor(), -0.1), "dropout_p");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, std::nan("")), "scale must be a finite number", "nan");
}

TEST(SdpaErrors, DevicesMustAgree) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor q = rand_f64({3, 4}, 1), k = rand_f64({5, 4}, 2), v = rand_f64({5, 2}, 3);
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k.cuda(), v), "one device", "cpu", "cuda:0");
  VOLT_EXPECT_ERROR(scaled_dot_product_attention(q, k, v, ones({3, 5}, DType::boolean, cuda_device(0))),
                    "attn_mask is on cuda:0");
}

TEST(SdpaCuda, MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Long rows (several thread strides per block), a broadcast strided mask and causal together; f32 and bf16.
  Tensor q = rand_f64({2, 3, 37, 16}, 131), k = rand_f64({2, 3, 300, 16}, 132), v = rand_f64({2, 3, 300, 8}, 133);
  Tensor keep = random_keep({2, 1, 37, 300}, 134);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor bias = rand_f64({37, 300}, 135).to(DType::f32);  // additive masks are read in fp32 for half inputs
    for (const Tensor& m : {keep, bias}) {
      Tensor qc = q.to(dt).cuda().set_requires_grad(), kc = k.to(dt).cuda().set_requires_grad();
      Tensor vc = v.to(dt).cuda().set_requires_grad();
      Tensor qh = q.to(dt).set_requires_grad(), kh = k.to(dt).set_requires_grad(), vh = v.to(dt).set_requires_grad();
      Tensor gc = scaled_dot_product_attention(qc, kc, vc, m.cuda(), 0.0, true);
      Tensor gh = scaled_dot_product_attention(qh, kh, vh, m, 0.0, true);
      // bf16: both devices round the same fp32 math at each op's output, but cuBLAS and the CPU GEMM may round
      // differently, and a one-ulp change in a score moves its weight.
      const double tol = dt == DType::f32 ? 1e-5 : 6e-2;
      expect_close(gc.cpu(), gh.to_vector<double>(), tol, tol);
      sum(mul(gc, gc)).backward();
      sum(mul(gh, gh)).backward();
      expect_close(qc.grad().cpu(), qh.grad().to_vector<double>(), tol, tol);
      expect_close(kc.grad().cpu(), kh.grad().to_vector<double>(), tol, tol);
      expect_close(vc.grad().cpu(), vh.grad().to_vector<double>(), tol, tol);
    }
  }
}

// ---- nn::MultiheadAttention -----------------------------------------------------------------------------------

namespace {

// The attention of `mha` on (N, L, E) inputs, composed by hand from linear, matmul and softmax; `bias` is an
// additive mask broadcastable to (N, H, L, S). Returns {output (N, L, E), weights (N, H, L, S)}.
std::pair<Tensor, Tensor> mha_reference(nn::MultiheadAttention& mha, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& bias = Tensor()) {
  const int64_t E = mha.embed_dim, H = mha.num_heads, D = E / H, N = q.size(0), L = q.size(1), S = k.size(1);
  auto proj = [&](const Tensor& x, int64_t i) {
    Tensor b = mha.in_proj_bias.defined() ? mha.in_proj_bias.narrow(0, i * E, E) : Tensor();
    return linear(x, mha.in_proj_weight.narrow(0, i * E, E), b);
  };
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({N, len, H, D}).transpose(1, 2); };
  Tensor qh = heads(proj(q, 0), L), kh = heads(proj(k, 1), S), vh = heads(proj(v, 2), S);
  Tensor w = ref_weights(qh, kh, 1.0 / std::sqrt(static_cast<double>(D)), bias);
  Tensor o = matmul(w, vh).transpose(1, 2).reshape({N, L, E});
  return {linear(o, mha.out_proj.weight, mha.out_proj.bias), w};
}

}  // namespace

TEST(MultiheadAttention, PyTorchParameterNamesAndInit) {
  manual_seed(1);
  nn::MultiheadAttention mha(8, 2);
  EXPECT_EQ(names(mha.state_dict()),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(mha.in_proj_bias.shape(), (Shape{24}));
  EXPECT_EQ(mha.out_proj.weight.shape(), (Shape{8, 8}));
  EXPECT_EQ(mha.num_parameters(), 24 * 8 + 24 + 64 + 8);
  expect_close(mha.in_proj_bias, std::vector<double>(24, 0.0), 0);
  expect_close(mha.out_proj.bias, std::vector<double>(8, 0.0), 0);
  // xavier_uniform over (3E, E): bound sqrt(6 / (E + 3E)).
  const double bound = std::sqrt(6.0 / 32.0);
  EXPECT_LE(max_abs(mha.in_proj_weight), bound);
  EXPECT_GT(max_abs(mha.in_proj_weight), 0.5 * bound);
  EXPECT_EQ(mha.extra_repr(), "embed_dim=8, num_heads=2, dropout=0, bias=true, batch_first=false");
  nn::MultiheadAttention no_bias(8, 4, 0.0, false);
  EXPECT_EQ(names(no_bias.state_dict()), (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
}

TEST(MultiheadAttention, MatchesCompositionOfOps) {
  manual_seed(2);
  nn::MultiheadAttention mha(6, 3, 0.0, true, /*batch_first=*/true);
  mha.to(DType::f64);
  {
    NoGradGuard ng;
    mha.in_proj_bias.copy_(rand_f64({18}, 3));  // nonzero biases exercise every term
    mha.out_proj.bias.copy_(rand_f64({6}, 4));
  }
  Tensor q = rand_f64({2, 4, 6}, 5), k = rand_f64({2, 5, 6}, 6), v = rand_f64({2, 5, 6}, 7);
  auto [out, w] = mha(q, k, v);
  auto [ro, rw] = mha_reference(mha, q, k, v);
  EXPECT_EQ(out.shape(), (Shape{2, 4, 6}));
  EXPECT_EQ(w.shape(), (Shape{2, 4, 5}));
  expect_close(out, ro.to_vector<double>(), 1e-12, 1e-12);
  expect_close(w, mean(rw, {1}).to_vector<double>(), 1e-12, 1e-12);
  // Per-head weights, and none.
  auto [out2, wh] = mha(q, k, v, Tensor(), true, Tensor(), /*average_attn_weights=*/false);
  expect_close(wh, rw.to_vector<double>(), 1e-12, 1e-12);
  auto [out3, none] = mha(q, k, v, Tensor(), /*need_weights=*/false);
  EXPECT_FALSE(none.defined());
  expect_close(out3, ro.to_vector<double>(), 1e-12, 1e-12);
  // Self-attention (one fused projection) equals the three-projection path; module(x) is the same.
  Tensor x = rand_f64({2, 4, 6}, 8);
  Tensor self = mha(x, x, x).first;
  expect_close(self, mha_reference(mha, x, x, x).first.to_vector<double>(), 1e-12, 1e-12);
  expect_close(mha(x), self.to_vector<double>(), 0, 0);
}

TEST(MultiheadAttention, SequenceFirstAndUnbatchedLayouts) {
  manual_seed(3);
  nn::MultiheadAttention bf(4, 2, 0.0, true, true), sf(4, 2, 0.0, true, false);
  bf.to(DType::f64);
  sf.to(DType::f64);
  sf.load_state_dict(bf.state_dict());
  Tensor q = rand_f64({3, 5, 4}, 9), k = rand_f64({3, 6, 4}, 10), v = rand_f64({3, 6, 4}, 11);  // (N, L, E)
  auto [ob, wb] = bf(q, k, v);
  auto [os, ws] = sf(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1));  // (L, N, E)
  EXPECT_EQ(os.shape(), (Shape{5, 3, 4}));
  expect_close(os.transpose(0, 1).contiguous(), ob.to_vector<double>(), 1e-12, 1e-12);
  expect_close(ws, wb.to_vector<double>(), 1e-12, 1e-12);  // weights are (N, L, S) in both layouts
  // Unbatched (L, E): the batch-of-one result without the batch dim.
  auto [ou, wu] = bf(q.select(0, 1), k.select(0, 1), v.select(0, 1));
  EXPECT_EQ(ou.shape(), (Shape{5, 4}));
  EXPECT_EQ(wu.shape(), (Shape{5, 6}));
  expect_close(ou, ob.select(0, 1).contiguous().to_vector<double>(), 1e-12, 1e-12);
  expect_close(wu, wb.select(0, 1).contiguous().to_vector<double>(), 1e-12, 1e-12);
}

TEST(MultiheadAttention, MasksFollowPyTorchConvention) {
  manual_seed(4);
  nn::MultiheadAttention mha(4, 2, 0.0, true, true);
  mha.to(DType::f64);
  const int64_t N = 2, L = 3, S = 4, H = 2;
  Tensor q = rand_f64({N, L, 4}, 12), k = rand_f64({N, S, 4}, 13), v = rand_f64({N, S, 4}, 14);
  // key_padding_mask: true = padding. Sample 0 pads its last key, sample 1 its last two.
  Tensor kpm = from_vector<uint8_t>({0, 0, 0, 1, 0, 0, 1, 1}, {N, S}).to(DType::boolean);
  auto [out, w] = mha(q, k, v, kpm);
  Tensor kpm_bias = where(kpm, full({}, -kInf, DType::f64), zeros({}, DType::f64)).reshape({N, 1, 1, S});
  auto [ro, rw] = mha_reference(mha, q, k, v, kpm_bias);
  expect_close(out, ro.to_vector<double>(), 1e-12, 1e-12);
  expect_close(w, mean(rw, {1}).to_vector<double>(), 1e-12, 1e-12);
  EXPECT_EQ(max_abs(w.select(0, 0).narrow(1, 3, 1)), 0.0);
  EXPECT_EQ(max_abs(w.select(0, 1).narrow(1, 2, 2)), 0.0);
  // attn_mask (L, S) bool: true = not allowed; combined with the padding mask.
  Tensor am = from_vector<uint8_t>({0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0}, {L, S}).to(DType::boolean);
  Tensor am_bias = where(am, full({}, -kInf, DType::f64), zeros({}, DType::f64));
  expect_close(mha(q, k, v, kpm, true, am).first,
               mha_reference(mha, q, k, v, add(kpm_bias, am_bias)).first.to_vector<double>(), 1e-12, 1e-12);
  // Float attn_mask per (sample, head): (N * H, L, S), added; with a bool padding mask.
  Tensor fm = rand_f64({N * H, L, S}, 15, -1, 1);
  expect_close(mha(q, k, v, kpm, true, fm).first,
               mha_reference(mha, q, k, v, add(kpm_bias, fm.reshape({N, H, L, S}))).first.to_vector<double>(), 1e-12,
               1e-12);
  // is_causal is applied.
  Tensor qs = rand_f64({N, L, 4}, 16);
  expect_close(mha(qs, qs, qs, Tensor(), true, Tensor(), true, true).first,
               mha_reference(mha, qs, qs, qs, additive_of(causal_keep(L, L))).first.to_vector<double>(), 1e-12, 1e-12);
  // A query whose keys are all padding attends to nothing: out_proj's bias alone, no NaN.
  Tensor all_pad = ones({N, S}, DType::boolean);
  Tensor o_pad = mha(q, k, v, all_pad).first;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i)
      expect_close(o_pad.select(0, n).select(0, i), mha.out_proj.bias.to_vector<double>(), 1e-12, 0);
}

TEST(MultiheadAttention, GradientsOfInputsAndParameters) {
  manual_seed(5);
  nn::MultiheadAttention mha(4, 2, 0.0, true, true);
  mha.to(DType::f64);
  {
    NoGradGuard ng;
    mha.in_proj_bias.copy_(rand_f64({12}, 17));
    mha.out_proj.bias.copy_(rand_f64({4}, 18));
  }
  Tensor kpm = from_vector<uint8_t>({0, 0, 1, 0, 0, 0}, {2, 3}).to(DType::boolean);
  Tensor q = rand_f64({2, 3, 4}, 19), k = rand_f64({2, 3, 4}, 20), v = rand_f64({2, 3, 4}, 21);
  expect_param_gradients_match([&] { return mha(q, k, v, kpm).first; }, mha.parameters());
  expect_param_gradients_match([&] { return mha(q, k, v, Tensor(), true, Tensor(), false).second; },
                               {mha.in_proj_weight, mha.in_proj_bias});
  expect_gradients_match(
      [&](const std::vector<Tensor>& x) { return mha(x[0], x[1], x[2], kpm, false, Tensor(), true, true).first; },
      {q.clone().set_requires_grad(), k.clone().set_requires_grad(), v.clone().set_requires_grad()});
  // Self-attention through the fused projection.
  Tensor x = rand_f64({2, 3, 4}, 22);
  expect_param_gradients_match([&] { return mha(x); }, mha.parameters());
}

TEST(MultiheadAttention, DropoutOnlyInTraining) {
  manual_seed(6);
  nn::MultiheadAttention mha(4, 2, 0.5, true, true);
  Tensor x = rand_f64({2, 5, 4}, 23).to(DType::f32);
  mha.eval();
  Tensor a = mha(x), b = mha(x);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  mha.train();
  auto [o, w] = mha(x, x, x, Tensor(), true, Tensor(), false);
  int64_t zeros_seen = 0;
  for (double e : w.to_vector<double>()) zeros_seen += e == 0.0;
  EXPECT_GT(zeros_seen, 0);
  EXPECT_NE(o.to_vector<float>(), a.to_vector<float>());
}

TEST(MultiheadAttention, Errors) {
  VOLT_EXPECT_ERROR(nn::MultiheadAttention(6, 4), "MultiheadAttention", "embed_dim (6) must be divisible by num_heads (4)");
  VOLT_EXPECT_ERROR(nn::MultiheadAttention(0, 1), "embed_dim must be positive");
  VOLT_EXPECT_ERROR(nn::MultiheadAttention(4, 2, 1.0), "dropout must be in [0, 1)");
  nn::MultiheadAttention mha(4, 2, 0.0, true, true);
  Tensor x = rand_f64({2, 3, 4}, 1).to(DType::f32);
  VOLT_EXPECT_ERROR(mha(rand_f64({2, 3, 5}, 1).to(DType::f32)), "must end in embed_dim=4", "(2, 3, 5)");
  VOLT_EXPECT_ERROR(mha(x, rand_f64({3, 4}, 1).to(DType::f32), x), "must all be", "batch_first");
  VOLT_EXPECT_ERROR(mha(x, x, x, ones({2, 4}, DType::boolean)), "key_padding_mask has shape (2, 4)", "(2, 3)");
  VOLT_EXPECT_ERROR(mha(x, x, x, Tensor(), true, ones({3, 2}, DType::boolean)), "attn_mask has shape (3, 2)",
                    "(L, S) = (3, 3)", "(N * num_heads, L, S) = (4, 3, 3)");
  VOLT_EXPECT_ERROR(mha(x, x, x, Tensor(), true, ones({3, 3}, DType::i64)), "attn_mask must be bool", "int64");
}

// ---- nn::Residual ---------------------------------------------------------------------------------------------

TEST(Residual, AddsTheInputAndRegistersFn) {
  manual_seed(7);
  auto lin = std::make_shared<nn::Linear>(3, 3);
  nn::Residual res(lin);
  EXPECT_EQ(names(res.state_dict()), (std::vector<std::string>{"fn.weight", "fn.bias"}));
  Tensor x = rand_f64({4, 3}, 24).to(DType::f32);
  expect_close(res(x), add(x, (*lin)(x)).to_vector<double>(), 0, 0);
  // In a Sequential: a pre-norm block.
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->push_back(std::make_shared<nn::LayerNorm>(4));
  mlp->push_back(std::make_shared<nn::Linear>(4, 8));
  mlp->push_back(std::make_shared<nn::GELU>());
  mlp->push_back(std::make_shared<nn::Linear>(8, 4));
  nn::Sequential block{std::make_shared<nn::Residual>(std::make_shared<nn::MultiheadAttention>(4, 2, 0.0, true, true)),
                       std::make_shared<nn::Residual>(mlp)};
  EXPECT_EQ(names(block.state_dict()),
            (std::vector<std::string>{"0.fn.in_proj_weight", "0.fn.in_proj_bias", "0.fn.out_proj.weight",
                                      "0.fn.out_proj.bias", "1.fn.0.weight", "1.fn.0.bias", "1.fn.1.weight",
                                      "1.fn.1.bias", "1.fn.3.weight", "1.fn.3.bias"}));
  block.to(DType::f64);
  Tensor h = rand_f64({2, 3, 4}, 25);
  Tensor a = block[0](h);  // h + attention(h)
  expect_close(block(h), add(a, (*mlp)(a)).to_vector<double>(), 1e-12, 1e-12);
  expect_param_gradients_match([&] { return block(h); }, block.parameters());
  expect_gradients_match([&](const std::vector<Tensor>& in) { return block(in[0]); }, {h.clone().set_requires_grad()});
}

TEST(Residual, Errors) {
  VOLT_EXPECT_ERROR(nn::Residual(nullptr), "Residual", "null");
  nn::Residual res(std::make_shared<nn::Linear>(3, 5));
  VOLT_EXPECT_ERROR(res(ones({2, 3})), "Residual", "(Linear)", "(2, 3)", "(2, 5)");
}

// ---- nn::TransformerEncoderLayer ------------------------------------------------------------------------------

TEST(TransformerEncoderLayer, PyTorchParameterNames) {
  nn::TransformerEncoderLayer layer(8, 2, 16);
  EXPECT_EQ(names(layer.state_dict()),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  EXPECT_EQ(layer.linear1.weight.shape(), (Shape{16, 8}));
  EXPECT_EQ(layer.linear2.weight.shape(), (Shape{8, 16}));
  EXPECT_EQ(layer.extra_repr(), "d_model=8, nhead=2, dim_feedforward=16, dropout=0.1, activation=relu, norm_first=false");
  nn::TransformerEncoderLayer no_bias(8, 2, 16, 0.0, nn::TransformerActivation::GELU, 1e-5, true, true, false);
  EXPECT_EQ(names(no_bias.state_dict()),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                                      "linear2.weight", "norm1.weight", "norm2.weight"}));
  VOLT_EXPECT_ERROR(nn::TransformerEncoderLayer(6, 4), "embed_dim (6) must be divisible by num_heads (4)");
}

TEST(TransformerEncoderLayer, PostAndPreNormMatchComposition) {
  for (bool norm_first : {false, true}) {
    for (auto act : {nn::TransformerActivation::ReLU, nn::TransformerActivation::GELU}) {
      manual_seed(8);
      nn::TransformerEncoderLayer layer(4, 2, 8, 0.0, act, 1e-5, /*batch_first=*/true, norm_first);
      layer.to(DType::f64);
      {
        NoGradGuard ng;  // non-trivial norm parameters
        layer.norm1.weight.copy_(rand_f64({4}, 26, 0.5, 1.5));
        layer.norm2.bias.copy_(rand_f64({4}, 27));
      }
      Tensor x = rand_f64({2, 3, 4}, 28);
      Tensor kpm = from_vector<uint8_t>({0, 0, 1, 0, 0, 0}, {2, 3}).to(DType::boolean);
      auto sa = [&](const Tensor& h) { return layer.self_attn(h, h, h, kpm, false, Tensor(), true, true).first; };
      auto ff = [&](const Tensor& h) {
        Tensor a = layer.linear1(h);
        a = act == nn::TransformerActivation::GELU ? gelu(a) : relu(a);
        return layer.linear2(a);
      };
      Tensor ref;
      if (norm_first) {
        Tensor h = add(x, sa(layer.norm1(x)));
        ref = add(h, ff(layer.norm2(h)));
      } else {
        Tensor h = layer.norm1(add(x, sa(x)));
        ref = layer.norm2(add(h, ff(h)));
      }
      Tensor out = layer(x, Tensor(), kpm, /*is_causal=*/true);
      expect_close(out, ref.to_vector<double>(), 1e-12, 1e-12);
      expect_param_gradients_match([&] { return layer(x, Tensor(), kpm, true); }, layer.parameters(), 1e-6, 1e-6,
                                   1e-4);
    }
  }
}

TEST(TransformerEncoderLayer, CausalOutputsIgnoreLaterPositions) {
  manual_seed(9);
  nn::TransformerEncoderLayer layer(8, 2, 16, 0.0, nn::TransformerActivation::GELU, 1e-5, true, true);
  Tensor x = rand_f64({1, 6, 8}, 29).to(DType::f32);
  Tensor y = rand_f64({1, 6, 8}, 30).to(DType::f32);
  Tensor mixed = cat({x.narrow(1, 0, 4), y.narrow(1, 4, 2)}, 1);  // the same first 4 positions
  Tensor a = layer(x, Tensor(), Tensor(), true), b = layer(mixed, Tensor(), Tensor(), true);
  expect_close(b.narrow(1, 0, 4).contiguous(), a.narrow(1, 0, 4).contiguous().to_vector<double>(), 1e-6, 1e-6);
  EXPECT_GT(max_abs(sub(a.narrow(1, 4, 2), b.narrow(1, 4, 2))), 1e-3);
  // Without the causal mask the early positions do change.
  Tensor c = layer(x), d = layer(mixed);
  EXPECT_GT(max_abs(sub(c.narrow(1, 0, 4), d.narrow(1, 0, 4))), 1e-4);
  // The same through an (L, S) bool attn_mask (PyTorch's convention: true = masked out, i.e. j > i).
  Tensor future = gt(arange(6).reshape({1, 6}), arange(6).reshape({6, 1}));
  expect_close(layer(x, future), a.to_vector<double>(), 1e-6, 1e-6);
}

TEST(TransformerEncoderLayer, TrainsOnACopyTask) {
  // A causal layer + linear head learns to copy the previous token: the loss falls well below chance.
  manual_seed(10);
  const int64_t V = 5, T = 6, D = 16;
  nn::Embedding emb(V, D), pos(T, D);
  nn::TransformerEncoderLayer layer(D, 2, 32, 0.0, nn::TransformerActivation::GELU, 1e-5, true, true);
  nn::Linear head(D, V);
  std::vector<Tensor> params;
  for (nn::Module* m : std::vector<nn::Module*>{&emb, &pos, &layer, &head})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 1e-2});
  Generator g(11);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor tokens = rand({8, T + 1}, DType::f32, kCPU, &g, 0, V).to(DType::i64);
    Tensor in = tokens.narrow(1, 1, T), target = tokens.narrow(1, 0, T);  // predict the previous token
    Tensor h = add(emb(in.contiguous()), pos(arange(T)));
    Tensor logits = head(layer(h, Tensor(), Tensor(), true));
    Tensor loss = cross_entropy(logits.narrow(1, 1, T - 1).reshape({-1, V}),
                                target.narrow(1, 1, T - 1).contiguous().reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_GT(first, 1.3);   // about ln(5) = 1.61 at the start
  EXPECT_LT(last, 0.5);
}

TEST(Sdpa, AutocastRunsInTheHalfDtype) {
  Tensor q = rand_f64({2, 5, 8}, 141).to(DType::f32), k = rand_f64({2, 6, 8}, 142).to(DType::f32);
  Tensor v = rand_f64({2, 6, 4}, 143).to(DType::f32);
  Tensor ref = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor qg = q.clone().set_requires_grad(), kg = k.clone().set_requires_grad(), vg = v.clone().set_requires_grad();
    Tensor out;
    {
      AutocastGuard g(true, dt);
      out = scaled_dot_product_attention(qg, kg, vg, Tensor(), 0.0, true);
    }
    EXPECT_EQ(out.dtype(), dt);
    expect_close(out, ref.to_vector<double>(), 3e-2, 3e-2);
    sum(out).backward();
    for (const Tensor& t : {qg, kg, vg}) {
      ASSERT_TRUE(t.grad().defined());
      EXPECT_EQ(t.grad().dtype(), DType::f32);
      for (double x : t.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(x)) << dtype_name(dt);
    }
  }
}
