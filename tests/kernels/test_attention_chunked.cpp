// scaled_dot_product_attention's chunked path (kernels/ops/attention_chunked.cpp, kernels/sdpa_path.h): calls without
// weights or a learned mask run a chunk of query rows at a time (dropout included) and keep no weights for the
// backward. It must give the whole-weights path's output and gradients (scaled_dot_product_attention_with_weights
// runs that path), match finite differences, hold no (batch..., L, S) tensor past a chunk, and, on a GPU, match the
// CPU. Under VOLT_DISABLE_KERNELS=chunked_attention (CTest kernels_disabled_paths) the cases say so and check the
// whole path.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "common/gradcheck.h"
#include "common/sdpa_test_util.h"
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/sdpa_path.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

using testing::expect_close_rel;
using testing::max_abs_diff;
using testing::expect_gradients_match;
using testing::rand_f64;

// sdpa_chunk_bytes set for the scope; the default again after.
struct ChunkBytes {
  explicit ChunkBytes(int64_t bytes) { set_sdpa_chunk_bytes(bytes); }
  ~ChunkBytes() { set_sdpa_chunk_bytes(0); }
};

bool chunking_on() {
  const bool on = !kernel_paths::disabled(kernel_paths::kChunkedAttention);
  if (!on) std::printf("chunked_attention path off (VOLT_DISABLE_KERNELS): checking the whole-weights path\n");
  return on;
}

// One attention call's output and the gradients of sum(out * w) (w fixed) with respect to q, k and v.
struct Result {
  Tensor out, dq, dk, dv;
};

Result run(const Tensor& q0, const Tensor& k0, const Tensor& v0, bool causal, bool whole, const Tensor& mask = {}) {
  Tensor q = q0.detach().clone().set_requires_grad(), k = k0.detach().clone().set_requires_grad();
  Tensor v = v0.detach().clone().set_requires_grad();
  Tensor out = whole ? scaled_dot_product_attention_with_weights(q, k, v, mask, 0.0, causal).first
                     : scaled_dot_product_attention(q, k, v, mask, 0.0, causal);
  Generator g(7);
  Tensor w = rand(out.shape(), DType::f32, kCPU, &g, 0.5, 1.5).to(out.dtype()).to(out.device());
  sum(mul(out, w)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// Budget for `rows` query rows of an (n, rows, s) chunk of scores.
int64_t rows_budget(int64_t n, int64_t rows, int64_t s, DType dt) {
  return n * rows * s * static_cast<int64_t>(itemsize(dt));
}

struct Case {
  Shape batch;
  int64_t l, s, e, ev;
  bool causal;
  int64_t rows;  // query rows per chunk
};

// Square and cross attention, causal with more keys than queries (keys past the last query get no gradient) and
// fewer (queries past the last key see every key), no batch dims, one row per chunk.
const std::vector<Case> kCases = {
    {{2, 3}, 37, 37, 8, 5, true, 5},  {{2, 3}, 37, 37, 8, 5, false, 5}, {{3}, 23, 41, 6, 4, true, 4},
    {{3}, 41, 23, 6, 4, true, 6},     {{}, 19, 19, 4, 3, true, 1},     {{2}, 12, 30, 5, 5, false, 5},
};

Shape with(Shape batch, int64_t a, int64_t b) {
  batch.push_back(a);
  batch.push_back(b);
  return batch;
}

TEST(ChunkedAttention, MatchesTheWholeWeightsPath) {
  const bool on = chunking_on();
  uint64_t seed = 10;
  for (const Case& c : kCases) {
    const Tensor q = rand_f64(with(c.batch, c.l, c.e), ++seed), k = rand_f64(with(c.batch, c.s, c.e), ++seed);
    const Tensor v = rand_f64(with(c.batch, c.s, c.ev), ++seed);
    const ChunkBytes budget(rows_budget(shape_numel(c.batch), c.rows, c.s, DType::f64));
    reset_sdpa_stats();
    const Result got = run(q, k, v, c.causal, false);
    EXPECT_EQ(sdpa_stats().chunked, on ? 1 : 0) << "L " << c.l << " S " << c.s;
    const Result want = run(q, k, v, c.causal, true);
    const std::string what = "L " + std::to_string(c.l) + " S " + std::to_string(c.s) + (c.causal ? " causal" : "");
    expect_close_rel(got.out, want.out, 1e-14, ("out, " + what).c_str());
    expect_close_rel(got.dq, want.dq, 1e-13, ("dq, " + what).c_str());
    expect_close_rel(got.dk, want.dk, 1e-13, ("dk, " + what).c_str());
    expect_close_rel(got.dv, want.dv, 1e-13, ("dv, " + what).c_str());
    if (c.causal && c.s > c.l) {  // keys no query reaches
      EXPECT_EQ(testing::max_abs(got.dk.narrow(-2, c.l, c.s - c.l)), 0.0) << what;
      EXPECT_EQ(testing::max_abs(got.dv.narrow(-2, c.l, c.s - c.l)), 0.0) << what;
    }
  }
}

// A bool keep-mask of `shape` with about a quarter of the keys dropped, and with row `empty` (of the last two dims)
// dropping every key.
Tensor keep_mask(const Shape& shape, uint64_t seed, int64_t empty = -1) {
  Tensor keep = gt(rand_f64(shape, seed, 0.0, 1.0), 0.25);
  if (empty >= 0) keep.narrow(-2, empty, 1).fill_(0.0);
  return keep;
}

// Batch dims that broadcast: k and v shared by every head (multi-query attention), and one q for a batch of keys.
TEST(ChunkedAttention, BroadcastBatchDimsMatchTheWholePath) {
  const bool on = chunking_on();
  struct Bcast {
    Shape q, k, v;
  };
  const std::vector<Bcast> cases = {{{2, 4, 13, 6}, {2, 1, 11, 6}, {2, 1, 11, 3}}, {{13, 6}, {3, 11, 6}, {3, 11, 3}},
                                    {{2, 4, 13, 6}, {4, 11, 6}, {1, 4, 11, 3}}};
  uint64_t seed = 130;
  for (const Bcast& c : cases) {
    const Tensor q = rand_f64(c.q, ++seed), k = rand_f64(c.k, ++seed), v = rand_f64(c.v, ++seed);
    for (bool causal : {false, true}) {
      const ChunkBytes budget(rows_budget(8, 3, 11, DType::f64));
      reset_sdpa_stats();
      const Result got = run(q, k, v, causal, false);
      EXPECT_EQ(sdpa_stats().chunked, on ? 1 : 0);
      const Result want = run(q, k, v, causal, true);
      EXPECT_EQ(got.dk.shape(), k.shape());
      EXPECT_EQ(got.dq.shape(), q.shape());
      expect_close_rel(got.out, want.out, 1e-14, "broadcast: out");
      expect_close_rel(got.dq, want.dq, 1e-13, "broadcast: dq");
      expect_close_rel(got.dk, want.dk, 1e-13, "broadcast: dk");
      expect_close_rel(got.dv, want.dv, 1e-13, "broadcast: dv");
    }
  }
  // bf16 multi-query attention at one row per chunk: dk and dv sum the chunks and the heads in f32 and are rounded
  // once, as the whole path's products are, so they agree to the last bit.
  const Tensor q = rand_f64({2, 4, 16, 8}, 141).to(DType::bf16), k = rand_f64({2, 1, 16, 8}, 142).to(DType::bf16);
  const Tensor v = rand_f64({2, 1, 16, 8}, 143).to(DType::bf16);
  const ChunkBytes budget(rows_budget(8, 1, 16, DType::bf16));
  const Result got = run(q, k, v, false, false), want = run(q, k, v, false, true);
  expect_close_rel(got.dk, want.dk, 1.0 / 128, "bf16 broadcast: dk");
  expect_close_rel(got.dv, want.dv, 1.0 / 128, "bf16 broadcast: dv");
  // Dropout over weights whose batch dims are q's and k's alone (v has more): one mask for every batch of v, as the
  // whole path draws it.
  reset_sdpa_stats();
  Generator g(5);
  scaled_dot_product_attention(rand_f64({13, 6}, 144), rand_f64({11, 6}, 145), rand_f64({3, 11, 3}, 146), Tensor(),
                               0.5, false, std::nullopt, &g);
  EXPECT_EQ(sdpa_stats().chunked, 0);
}

// Masks are read a chunk at a time: a key padding mask broadcast over heads and queries, a keep-mask over (L, S)
// with a query that keeps no key, a full per-head mask with is_causal, and additive masks (a fixed position bias),
// broadcast and not; each against the whole path, with several chunks.
TEST(ChunkedAttention, MasksMatchTheWholeWeightsPath) {
  const bool on = chunking_on();
  const Tensor q = rand_f64({2, 3, 21, 6}, 81), k = rand_f64({2, 3, 17, 6}, 82), v = rand_f64({2, 3, 17, 5}, 83);
  const Tensor qs = rand_f64({2, 3, 17, 6}, 84);  // square, for is_causal
  struct MaskCase {
    const char* what;
    Tensor q, mask;
    bool causal;
  };
  const std::vector<MaskCase> cases = {
      {"key padding (2, 1, 1, S)", q, keep_mask({2, 1, 1, 17}, 85), false},
      {"keep (L, S), an empty row", q, keep_mask({21, 17}, 86, 4), false},
      {"keep (2, 3, L, S), causal", qs, keep_mask({2, 3, 17, 17}, 87, 9), true},
      {"additive (L, S)", q, rand_f64({21, 17}, 88, -2, 2), false},
      {"additive (3, 1, S), causal", qs, rand_f64({3, 1, 17}, 89, -2, 2), true},
  };
  for (const MaskCase& c : cases) {
    const ChunkBytes budget(rows_budget(6, 4, 17, DType::f64));
    reset_sdpa_stats();
    const Result got = run(c.q, k, v, c.causal, false, c.mask);
    EXPECT_EQ(sdpa_stats().chunked, on ? 1 : 0) << c.what;
    const Result want = run(c.q, k, v, c.causal, true, c.mask);
    expect_close_rel(got.out, want.out, 1e-14, c.what);
    expect_close_rel(got.dq, want.dq, 1e-13, c.what);
    expect_close_rel(got.dk, want.dk, 1e-13, c.what);
    expect_close_rel(got.dv, want.dv, 1e-13, c.what);
  }
  // A learned bias (an additive mask that requires grad) keeps the whole path, which forms its gradient.
  Tensor bias = rand_f64({21, 17}, 90, -2, 2).set_requires_grad();
  reset_sdpa_stats();
  sum(scaled_dot_product_attention(q, k, v, bias)).backward();
  EXPECT_EQ(sdpa_stats().chunked, 0);
  EXPECT_TRUE(bias.grad().defined());
}

// Dropout draws each chunk's (n, c, keys) weights from the next counters of one draw for the call: here the output
// equals softmax weights times keep / (1 - p) with keep built chunk by chunk from rand_with_seed, causal and not,
// and the generator moves past exactly those counters. With one chunk (no causal skipping) that is the whole
// path's own draw, so both paths give the same output and gradients.
TEST(ChunkedAttention, DropoutDrawsEachChunkFromTheCallsCounters) {
  if (!chunking_on()) return;
  const double p = 0.4;
  const Tensor q = rand_f64({2, 3, 10, 4}, 101), k = rand_f64({2, 3, 10, 4}, 102), v = rand_f64({2, 3, 10, 3}, 103);
  for (bool causal : {false, true}) {
    const int64_t n = 6, l = 10, rows = 3;
    const ChunkBytes budget(rows_budget(n, rows, l, DType::f64));
    Generator gen(11);
    gen.set_offset(5);
    const Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), p, causal, std::nullopt, &gen);
    const Tensor weights =
        scaled_dot_product_attention_with_weights(q, k, v, Tensor(), 0.0, causal).second.reshape({n, l, l});
    Tensor scale = zeros({n, l, l}, DType::f64);
    uint64_t offset = 5;
    for (int64_t r0 = 0; r0 < l; r0 += rows) {
      const int64_t c = std::min(rows, l - r0), keys = causal ? r0 + c : l;
      const Tensor keep = ge(rand_with_seed({n, c, keys}, 11, offset), p).to(DType::f64);
      Tensor dst = scale.narrow(1, r0, c).narrow(2, 0, keys);
      dst.copy_(mul(keep, 1.0 / (1.0 - p)));
      offset += static_cast<uint64_t>(n * c * keys + 3) / 4;
    }
    const Tensor want = matmul(mul(weights, scale), v.reshape({n, l, 3})).reshape(out.shape());
    expect_close_rel(out, want, 1e-14, causal ? "dropout, causal" : "dropout");
    EXPECT_EQ(gen.offset(), offset);
  }
  // One chunk: the whole path's draw.
  Generator g1(12), g2(12);
  const Result one = [&] {
    Tensor a = q.clone().set_requires_grad(), b = k.clone().set_requires_grad(), c = v.clone().set_requires_grad();
    Tensor out = scaled_dot_product_attention(a, b, c, Tensor(), p, false, std::nullopt, &g1);
    sum(mul(out, out)).backward();
    return Result{out.detach(), a.grad(), b.grad(), c.grad()};
  }();
  Tensor a = q.clone().set_requires_grad(), b = k.clone().set_requires_grad(), c = v.clone().set_requires_grad();
  Tensor whole = scaled_dot_product_attention_with_weights(a, b, c, Tensor(), p, false, std::nullopt, &g2).first;
  sum(mul(whole, whole)).backward();
  expect_close_rel(one.out, whole, 1e-14, "one chunk: out");
  expect_close_rel(one.dq, a.grad(), 1e-13, "one chunk: dq");
  expect_close_rel(one.dk, b.grad(), 1e-13, "one chunk: dk");
  expect_close_rel(one.dv, c.grad(), 1e-13, "one chunk: dv");
  EXPECT_EQ(g1.offset(), g2.offset());
}

// The backward draws the forward's masks again (finite differences with a generator re-seeded per call), and a
// second derivative goes through the whole path with the forward's masks: the first derivative taken with
// create_graph equals the one taken without.
TEST(ChunkedAttention, DropoutBackwardUsesTheForwardsMasks) {
  chunking_on();
  auto in = [](const Shape& s, uint64_t seed) { return rand_f64(s, seed).set_requires_grad(); };
  const ChunkBytes budget(rows_budget(2, 2, 6, DType::f64));
  for (bool causal : {false, true}) {
    expect_gradients_match(
        [causal](const std::vector<Tensor>& x) {
          Generator g(21);
          return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.3, causal, std::nullopt, &g);
        },
        {in({2, 6, 3}, 111), in({2, 6, 3}, 112), in({2, 6, 2}, 113)});
    auto first = [&](bool create_graph) {
      Tensor q = rand_f64({2, 6, 3}, 114).set_requires_grad(), k = rand_f64({2, 6, 3}, 115).set_requires_grad();
      Tensor v = rand_f64({2, 6, 2}, 116).set_requires_grad();
      Generator g(22);
      Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.5, causal, std::nullopt, &g);
      autograd::GradOptions o;
      o.create_graph = create_graph;
      return autograd::grad({sum(mul(out, out))}, {q, k, v}, {}, o);
    };
    const std::vector<Tensor> plain = first(false), graphed = first(true);
    for (size_t i = 0; i < plain.size(); ++i) expect_close_rel(graphed[i], plain[i], 1e-13, "create_graph");
  }
  // With a mask and broadcast batch dims too: finite differences, and create_graph against plain.
  const Tensor keep = keep_mask({2, 1, 6, 6}, 117, 2);
  auto attend = [keep](const std::vector<Tensor>& x) {
    Generator g(23);
    return scaled_dot_product_attention(x[0], x[1], x[2], keep, 0.3, true, std::nullopt, &g);
  };
  const ChunkBytes budget4(rows_budget(4, 2, 6, DType::f64));
  expect_gradients_match(attend, {in({2, 2, 6, 3}, 118), in({2, 1, 6, 3}, 119), in({2, 1, 6, 2}, 120)});
  auto first = [&](bool create_graph) {
    Tensor q = rand_f64({2, 2, 6, 3}, 121).set_requires_grad(), k = rand_f64({2, 1, 6, 3}, 122).set_requires_grad();
    Tensor v = rand_f64({2, 1, 6, 2}, 123).set_requires_grad();
    Tensor out = attend({q, k, v});
    autograd::GradOptions o;
    o.create_graph = create_graph;
    return autograd::grad({sum(mul(out, out))}, {q, k, v}, {}, o);
  };
  const std::vector<Tensor> plain = first(false), graphed = first(true);
  for (size_t i = 0; i < plain.size(); ++i) expect_close_rel(graphed[i], plain[i], 1e-13, "create_graph, mask");
}

// Under a CPU Graph capture the chunks' draws are the capture's: each replay equals the eager step it stands for.
TEST(ChunkedAttention, DropoutReplaysUnderAGraphCapture) {
  chunking_on();
  const Tensor q = rand_f64({2, 8, 3}, 121).set_requires_grad(), k = rand_f64({2, 8, 3}, 122).set_requires_grad();
  const Tensor v = rand_f64({2, 8, 2}, 123).set_requires_grad();
  const ChunkBytes budget(rows_budget(2, 3, 8, DType::f64));
  Generator gen(31);
  auto step = [&] {
    Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.5, true, std::nullopt, &gen);
    return autograd::grad({sum(mul(out, out))}, {q, k, v});
  };
  std::vector<std::vector<Tensor>> eager;
  for (int r = 0; r < 3; ++r) eager.push_back(step());
  gen.manual_seed(31);
  Graph g(kCPU);
  g.capture_begin();
  const std::vector<Tensor> captured = step();
  g.capture_end();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(g.replay());
    for (size_t i = 0; i < captured.size(); ++i)
      EXPECT_EQ(max_abs_diff(captured[i], eager[static_cast<size_t>(r)][i]), 0.0) << "replay " << r << " input " << i;
  }
  EXPECT_GT(max_abs_diff(eager[0][0], eager[1][0]), 0.0) << "the steps' masks should differ";
}

TEST(ChunkedAttention, GradientsMatchFiniteDifferences) {
  chunking_on();
  auto in = [](const Shape& s, uint64_t seed) { return rand_f64(s, seed).set_requires_grad(); };
  const ChunkBytes budget(rows_budget(2, 2, 6, DType::f64));  // 2 query rows per chunk at 6 keys
  expect_gradients_match(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true); },
      {in({2, 5, 3}, 31), in({2, 5, 3}, 32), in({2, 5, 2}, 33)});
  expect_gradients_match([](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
                         {in({2, 4, 3}, 34), in({2, 6, 3}, 35), in({2, 6, 4}, 36)});
  expect_gradients_match(
      [](const std::vector<Tensor>& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.6);
      },
      {in({2, 6, 3}, 37), in({2, 4, 3}, 38), in({2, 4, 2}, 39)});
  // A key padding mask and a keep-mask with an empty row, read a chunk at a time.
  const Tensor pad = keep_mask({2, 1, 6}, 41), keep = keep_mask({4, 6}, 42, 1);
  expect_gradients_match(
      [pad](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], pad); },
      {in({2, 4, 3}, 43), in({2, 6, 3}, 44), in({2, 6, 4}, 45)});
  expect_gradients_match(
      [keep](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep, 0.0, true); },
      {in({2, 4, 3}, 46), in({2, 6, 3}, 47), in({2, 6, 4}, 48)});
  // One tensor as q, k and v (self-attention): the three gradients add up.
  expect_gradients_match(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[0], x[0], Tensor(), 0.0, true); },
      {in({2, 5, 3}, 40)});
}

// A second derivative goes through the whole-weights path's differentiable definition: the same Hessian-vector
// product as when the first derivative came from that path.
TEST(ChunkedAttention, SecondDerivativeMatchesTheWholePath) {
  const Tensor q0 = rand_f64({2, 6, 3}, 41), k0 = rand_f64({2, 6, 3}, 42), v0 = rand_f64({2, 6, 2}, 43);
  const ChunkBytes budget(rows_budget(2, 2, 6, DType::f64));
  auto hvp = [&](bool whole) {
    Tensor q = q0.clone().set_requires_grad(), k = k0.clone().set_requires_grad(), v = v0.clone().set_requires_grad();
    Tensor out = whole ? scaled_dot_product_attention_with_weights(q, k, v, Tensor(), 0.0, true).first
                       : scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    autograd::GradOptions o;
    o.create_graph = true;
    std::vector<Tensor> g = autograd::grad({sum(mul(out, out))}, {q, k}, {}, o);
    sum(add(mul(g[0], g[0]), mul(g[1], g[1]))).backward();
    return std::vector<Tensor>{q.grad(), k.grad(), v.grad()};
  };
  const std::vector<Tensor> got = hvp(false), want = hvp(true);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << "input " << i;
    expect_close_rel(got[i], want[i], 1e-12, "second derivative");
  }
}

// Half dtypes on the CPU (products in f32, rounded once to the dtype): one query row per chunk, so dk and dv are
// sums of 64 chunks. They sum in f32 and are rounded once, as the whole path's single product is, so the two agree
// to the dtype's last bit (summing in the half dtype would be off by several).
TEST(ChunkedAttention, HalfDtypesFollowTheWholePath) {
  chunking_on();
  const Tensor q = rand_f64({2, 2, 64, 16}, 51), k = rand_f64({2, 2, 64, 16}, 52), v = rand_f64({2, 2, 64, 8}, 53);
  for (DType dt : {DType::bf16, DType::f16}) {
    const ChunkBytes budget(rows_budget(4, 1, 64, dt));
    const Result got = run(q.to(dt), k.to(dt), v.to(dt), false, false);
    const Result want = run(q.to(dt), k.to(dt), v.to(dt), false, true);
    const double ulp = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;  // of values in [1, 2)
    EXPECT_EQ(got.out.dtype(), dt);
    EXPECT_EQ(got.dk.dtype(), dt);
    expect_close_rel(got.out, want.out, ulp, dtype_name(dt));
    expect_close_rel(got.dq, want.dq, ulp, dtype_name(dt));
    expect_close_rel(got.dk, want.dk, ulp, dtype_name(dt));
    expect_close_rel(got.dv, want.dv, ulp, dtype_name(dt));
  }
}

// Inputs that need no gradient get none, and the others get the whole path's.
TEST(ChunkedAttention, OnlyTheInputsThatNeedItGetAGradient) {
  const Tensor q0 = rand_f64({2, 9, 4}, 54), k0 = rand_f64({2, 9, 4}, 55), v0 = rand_f64({2, 9, 3}, 56);
  const ChunkBytes budget(rows_budget(2, 2, 9, DType::f64));
  const Result whole = run(q0, k0, v0, true, true);
  for (int needs = 1; needs < 8; ++needs) {
    Tensor q = q0.clone(), k = k0.clone(), v = v0.clone();
    if (needs & 1) q.set_requires_grad();
    if (needs & 2) k.set_requires_grad();
    if (needs & 4) v.set_requires_grad();
    Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    Generator g(7);
    sum(mul(out, rand(out.shape(), DType::f32, kCPU, &g, 0.5, 1.5).to(DType::f64))).backward();
    const Tensor* grads[] = {&whole.dq, &whole.dk, &whole.dv};
    const Tensor* ins[] = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(ins[i]->grad().defined(), bool(needs & (1 << i))) << "needs " << needs << " input " << i;
      if (ins[i]->grad().defined()) expect_close_rel(ins[i]->grad(), *grads[i], 1e-13, "gradient");
    }
  }
}

// The forward holds its output and nothing else for the backward, and at its peak one chunk's scores more; the
// whole path keeps the (n, L, S) weights. The backward's peak is its gradients plus two chunks.
TEST(ChunkedAttention, KeepsNoWeightsForTheBackward) {
  const bool on = chunking_on();
  const int64_t n = 4, l = 128, e = 8, rows = 16;
  const int64_t out_bytes = n * l * e * 4, weights = n * l * l * 4, chunk = n * rows * l * 4;
  const Tensor q = rand_f64({2, 2, l, e}, 61).to(DType::f32).set_requires_grad();
  const Tensor k = rand_f64({2, 2, l, e}, 62).to(DType::f32).set_requires_grad();
  const Tensor v = rand_f64({2, 2, l, e}, 63).to(DType::f32).set_requires_grad();
  const ChunkBytes budget(chunk);
  const int64_t before = memory_stats(kCPU).allocated;
  reset_peak_memory_stats(kCPU);
  Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  const int64_t peak = memory_stats(kCPU).peak_allocated - before, held = memory_stats(kCPU).allocated - before;
  std::printf("attention forward: peak %lld bytes, %lld held (output %lld, one chunk %lld, whole weights %lld)\n",
              static_cast<long long>(peak), static_cast<long long>(held), static_cast<long long>(out_bytes),
              static_cast<long long>(chunk), static_cast<long long>(weights));
  if (!on) {
    EXPECT_GE(held, out_bytes + weights);
    return;
  }
  EXPECT_EQ(held, out_bytes);
  EXPECT_LE(peak, out_bytes + chunk);
  const Tensor g = ones(out.shape(), DType::f32);
  const int64_t before_bwd = memory_stats(kCPU).allocated;
  reset_peak_memory_stats(kCPU);
  out.backward(g);
  const int64_t bwd_peak = memory_stats(kCPU).peak_allocated - before_bwd;
  std::printf("attention backward: peak %lld bytes over what the forward held\n", static_cast<long long>(bwd_peak));
  EXPECT_LE(bwd_peak, 3 * out_bytes + 2 * chunk);  // dq, dk, dv and the two chunk buffers
}

// Under is_causal a call splits into 8 chunks (of 64 rows or more) whatever the budget allows, since each chunk skips
// the keys past its last query; without it the default budget takes all 1024 rows at once. Seen in the forward's
// peak: the output and one chunk's f32 scores.
TEST(ChunkedAttention, CausalCallsRunInEightChunks) {
  if (!chunking_on()) return;
  const int64_t n = 2, l = 1024, e = 4, out_bytes = n * l * e * 4;
  const Tensor q = rand_f64({n, l, e}, 64).to(DType::f32), k = rand_f64({n, l, e}, 65).to(DType::f32);
  const Tensor v = rand_f64({n, l, e}, 66).to(DType::f32);
  for (bool causal : {true, false}) {
    const int64_t before = memory_stats(kCPU).allocated;
    reset_peak_memory_stats(kCPU);
    Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, causal);
    const int64_t peak = memory_stats(kCPU).peak_allocated - before;
    const int64_t rows = causal ? l / 8 : l;
    EXPECT_EQ(peak, out_bytes + n * rows * l * 4) << (causal ? "causal" : "not causal");
  }
}

TEST(ChunkedAttention, ChunkBytesSetting) {
  const int64_t def = sdpa_chunk_bytes();
  EXPECT_EQ(def, int64_t{256} << 20);
  {
    const ChunkBytes budget(1000);
    EXPECT_EQ(sdpa_chunk_bytes(), 1000);
  }
  EXPECT_EQ(sdpa_chunk_bytes(), def);
  set_sdpa_chunk_bytes(-5);
  EXPECT_EQ(sdpa_chunk_bytes(), def);
}

// On a GPU without cuDNN's SDPA (switched off for the scope): the chunked path in f32, f16 and bf16 against the
// CPU's whole-weights path in f64: several chunks, causal and not, L != S, one batch matrix (cuBLAS's unbatched call
// and, in f32, Volt's small GEMM writing at a row offset), one row per chunk; then with masks, and with dropout.
TEST(ChunkedAttentionCuda, MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  const bool on = chunking_on();
  const testing::DisableCudnnSdpa no_cudnn;
  const std::vector<Case> cases = {{{2, 3}, 100, 100, 16, 16, true, 24},
                                   {{2, 3}, 100, 100, 16, 16, false, 24},
                                   {{2, 3}, 70, 100, 16, 8, false, 9},
                                   {{1}, 100, 100, 16, 16, true, 30},
                                   {{2}, 20, 20, 8, 8, true, 1}};
  uint64_t seed = 70;
  for (const Case& c : cases) {
    const Tensor q = rand_f64(with(c.batch, c.l, c.e), ++seed), k = rand_f64(with(c.batch, c.s, c.e), ++seed);
    const Tensor v = rand_f64(with(c.batch, c.s, c.ev), ++seed);
    const Result want = run(q, k, v, c.causal, true);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const ChunkBytes budget(rows_budget(shape_numel(c.batch), c.rows, c.s, dt));
      reset_sdpa_stats();
      const Device gpu = cuda_device(0);
      const Result got = run(q.to(dt).to(gpu), k.to(dt).to(gpu), v.to(dt).to(gpu), c.causal, false);
      EXPECT_EQ(sdpa_stats().chunked, on ? 1 : 0);
      const double tol = dt == DType::f32 ? 1e-5 : dt == DType::f16 ? 4e-3 : 2e-2;
      const std::string what = std::string(dtype_name(dt)) + " L " + std::to_string(c.l) + " S " +
                               std::to_string(c.s) + (c.causal ? " causal" : "");
      expect_close_rel(got.out, want.out, tol, ("out " + what).c_str());
      expect_close_rel(got.dq, want.dq, tol, ("dq " + what).c_str());
      expect_close_rel(got.dk, want.dk, tol, ("dk " + what).c_str());
      expect_close_rel(got.dv, want.dv, tol, ("dv " + what).c_str());
    }
  }
  // A key padding mask and an additive (L, S) bias, read a chunk at a time on the device.
  const Tensor q = rand_f64({2, 3, 90, 16}, 91), k = rand_f64({2, 3, 90, 16}, 92), v = rand_f64({2, 3, 90, 8}, 93);
  for (const Tensor& mask : {keep_mask({2, 1, 1, 90}, 94), rand_f64({90, 90}, 95, -2, 2)}) {
    const Result want = run(q, k, v, true, true, mask);
    for (DType dt : {DType::f32, DType::bf16}) {
      const ChunkBytes budget(rows_budget(6, 16, 90, dt));
      const Device gpu = cuda_device(0);
      const Tensor m = mask.dtype() == DType::boolean ? mask.to(gpu) : mask.to(DType::f32).to(gpu);
      const Result got = run(q.to(dt).to(gpu), k.to(dt).to(gpu), v.to(dt).to(gpu), true, false, m);
      const double tol = dt == DType::f32 ? 1e-5 : 2e-2;
      const std::string what = std::string(dtype_name(dt)) + (mask.dtype() == DType::boolean ? " padding" : " bias");
      expect_close_rel(got.out, want.out, tol, ("out " + what).c_str());
      expect_close_rel(got.dq, want.dq, tol, ("dq " + what).c_str());
      expect_close_rel(got.dk, want.dk, tol, ("dk " + what).c_str());
      expect_close_rel(got.dv, want.dv, tol, ("dv " + what).c_str());
    }
  }
  // Dropout: the same chunks draw the same Philox masks on the device as on the CPU.
  for (DType dt : {DType::f32, DType::bf16}) {
    auto dropped = [&](const Tensor& a, const Tensor& b, const Tensor& c, DType budget_dt) {
      const ChunkBytes budget(rows_budget(6, 16, 90, budget_dt));
      Tensor qa = a.clone().set_requires_grad(), kb = b.clone().set_requires_grad(), vc = c.clone().set_requires_grad();
      Generator g(41);
      Tensor out = scaled_dot_product_attention(qa, kb, vc, Tensor(), 0.3, true, std::nullopt, &g);
      sum(mul(out, out.detach())).backward();
      return Result{out.detach(), qa.grad(), kb.grad(), vc.grad()};
    };
    const Result want = dropped(q, k, v, DType::f64);
    const Device gpu = cuda_device(0);
    const Result got = dropped(q.to(dt).to(gpu), k.to(dt).to(gpu), v.to(dt).to(gpu), dt);
    const double tol = dt == DType::f32 ? 1e-5 : 3e-2;
    const std::string what = std::string(dtype_name(dt)) + " dropout";
    expect_close_rel(got.out, want.out, tol, ("out " + what).c_str());
    expect_close_rel(got.dq, want.dq, tol, ("dq " + what).c_str());
    expect_close_rel(got.dk, want.dk, tol, ("dk " + what).c_str());
    expect_close_rel(got.dv, want.dv, tol, ("dv " + what).c_str());
  }
}

}  // namespace
}  // namespace volt
