// matmul and linear: forward against naive loops, gradients against finite differences, error messages.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>
#include <volt/kernels/ops/gemm_util.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::rand_f64;

// Reference for a (..., n, k) @ b (..., k, m) with NumPy batch broadcasting, in double.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape* out_shape = nullptr) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "ref");
  const int64_t nb = shape_numel(batch);
  std::vector<double> out(static_cast<size_t>(nb * n * m), 0.0);
  auto batch_index = [&](const Shape& own, int64_t flat) {  // broadcast flat batch index into own batch dims
    int64_t idx = 0, mul = 1;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1, od = static_cast<int64_t>(own.size()) - 1; d >= 0;
         --d, --od) {
      int64_t i = flat % batch[d];
      flat /= batch[d];
      if (od < 0) continue;
      if (own[od] != 1) idx += i * mul;
      mul *= own[od];
    }
    return idx;
  };
  for (int64_t t = 0; t < nb; ++t) {
    int64_t ia = batch_index(ba, t), ib = batch_index(bb, t);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[(ia * n + i) * k + p] * bv[(ib * k + p) * m + j];
        out[(t * n + i) * m + j] = s;
      }
  }
  if (out_shape) {
    *out_shape = batch;
    out_shape->push_back(n);
    out_shape->push_back(m);
  }
  return out;
}

Tensor randf(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return rand(s, DType::f32, kCPU, &g, -1.0, 1.0);
}

TEST(Matmul, TwoDMatchesNaive) {
  Tensor a = randf({5, 7}, 1), b = randf({7, 3}, 2);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{5, 3}));
  expect_close(c, ref_matmul(a, b), 1e-5);
}

TEST(Matmul, TransposedViewsNeedNoCopyAndMatch) {
  Tensor at = randf({7, 5}, 3), bt = randf({3, 7}, 4);
  Tensor a = at.t(), b = bt.t();  // non-contiguous (5, 7) and (7, 3)
  ASSERT_FALSE(a.is_contiguous());
  expect_close(matmul(a, b), ref_matmul(a.contiguous(), b.contiguous()), 1e-5);
  expect_close(matmul(a, bt.t().contiguous()), ref_matmul(a.contiguous(), b.contiguous()), 1e-5);
  // A column slice (row stride 8, unit column stride) and a strided-step slice (needs a copy).
  Tensor wide = randf({5, 8}, 5);
  Tensor sl = wide.narrow(1, 1, 7);
  expect_close(matmul(sl, b), ref_matmul(sl.contiguous(), b.contiguous()), 1e-5);
  Tensor stepped = randf({5, 14}, 6).slice(1, 0, 14, 2);
  expect_close(matmul(stepped, b), ref_matmul(stepped.contiguous(), b.contiguous()), 1e-5);
}

TEST(Matmul, VectorCases) {
  Tensor v = from_vector<float>({1, 2, 3}), w = from_vector<float>({4, 5, 6});
  Tensor d = matmul(v, w);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_NEAR(d.item(), 32.0, 1e-6);
  Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor vm = matmul(v, m);  // (3) @ (3, 2) -> (2)
  EXPECT_EQ(vm.shape(), (Shape{2}));
  expect_close(vm, {1 + 6 + 15, 2 + 8 + 18});
  Tensor mv = matmul(m.t(), v);  // (2, 3) @ (3) -> (2)
  expect_close(mv, {22, 28});
  Tensor bv = matmul(randf({4, 2, 3}, 7), v);  // batched matrix @ vector -> (4, 2)
  EXPECT_EQ(bv.shape(), (Shape{4, 2}));
}

TEST(Matmul, BatchedAndBroadcast) {
  Tensor a = randf({3, 4, 5}, 8), b = randf({3, 5, 2}, 9);
  expect_close(matmul(a, b), ref_matmul(a, b), 1e-5);
  Tensor a2 = randf({2, 1, 4, 5}, 10), b2 = randf({3, 5, 6}, 11);  // batch (2,1) x (3) -> (2,3)
  Shape s;
  std::vector<double> ref = ref_matmul(a2, b2, &s);
  Tensor c2 = matmul(a2, b2);
  EXPECT_EQ(c2.shape(), s);
  expect_close(c2, ref, 1e-5);
  Tensor a3 = randf({2, 3, 4, 5}, 12), b3 = randf({5, 2}, 13);  // folded into one GEMM
  expect_close(matmul(a3, b3), ref_matmul(a3, b3), 1e-5);
  Tensor bt = randf({3, 6, 5}, 14).transpose(1, 2);  // batched transposed operand
  expect_close(matmul(a2, bt), ref_matmul(a2, bt.contiguous()), 1e-5);
}

TEST(Matmul, Float64AndEmpty) {
  Tensor a = rand_f64({6, 4}, 1), b = rand_f64({4, 9}, 2);
  expect_close(matmul(a, b), ref_matmul(a, b), 1e-12);
  Tensor e = matmul(zeros({3, 0}), zeros({0, 2}));
  expect_close(e, {0, 0, 0, 0, 0, 0});
}

// linalg_detail::gemm_into (the products of matmul, linear_cross_entropy's and attention's chunks) writes an out
// whose rows have unit stride in place, through the GEMM's leading dimension and batch stride: here columns [1, 5)
// of (2, 5, 7) matrices (ldc 7, not 4), with and without accumulation, and a narrow of rows that f16 operands
// accumulate into in f32; the columns around are untouched. A transposed out goes through a copy.
TEST(GemmInto, WritesViewsOfRowsInPlace) {
  const Tensor a = rand_f64({2, 5, 3}, 21), b = rand_f64({2, 3, 4}, 22);
  const std::vector<double> ab = ref_matmul(a, b);
  Tensor out = full({2, 5, 7}, 0.5, DType::f64);
  linalg_detail::gemm_into(out.narrow(2, 1, 4), a, b, false);
  expect_close(out.narrow(2, 1, 4).contiguous(), ab, 1e-15, 1e-15);
  for (int64_t col : {0, 5, 6})
    expect_close(out.narrow(2, col, 1).contiguous(), std::vector<double>(10, 0.5), 0.0, 0.0);
  linalg_detail::gemm_into(out.narrow(2, 1, 4), a, b, /*accumulate=*/true);
  std::vector<double> twice = ab;
  for (double& x : twice) x *= 2;
  expect_close(out.narrow(2, 1, 4).contiguous(), twice, 1e-15, 1e-15);

  Tensor acc = zeros({2, 8, 4}, DType::f32);  // f16 operands, f32 out: rows [2, 7) of each matrix
  linalg_detail::gemm_into(acc.narrow(1, 2, 5), a.to(DType::f16), b.to(DType::f16), false);
  expect_close(acc.narrow(1, 2, 5).contiguous(), ref_matmul(a.to(DType::f16), b.to(DType::f16)), 1e-6, 1e-6);
  EXPECT_EQ(max(abs(acc.narrow(1, 0, 2))).item(), 0.0);
  EXPECT_EQ(max(abs(acc.narrow(1, 7, 1))).item(), 0.0);

  Tensor t = zeros({2, 4, 5}, DType::f64);  // written through its (2, 5, 4) transpose: a copy
  linalg_detail::gemm_into(t.transpose(1, 2), a, b, false);
  expect_close(t.transpose(1, 2).contiguous(), ab, 1e-15, 1e-15);
}

TEST(Matmul, GradientsMatchFiniteDifferences) {
  Tensor a = rand_f64({3, 4}, 21).set_requires_grad(), b = rand_f64({4, 2}, 22).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
  // Non-contiguous inputs (transposes of leaves) and broadcast batch dims.
  Tensor at = rand_f64({4, 3}, 23).set_requires_grad(), bb = rand_f64({2, 1, 4, 2}, 24).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0].t(), in[1]); }, {at, bb});
  Tensor x = rand_f64({2, 3, 4}, 25).set_requires_grad(), y = rand_f64({4, 5}, 26).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {x, y});
  Tensor u = rand_f64({4}, 27).set_requires_grad(), v = rand_f64({4}, 28).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {u, v});
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {u, y});
}

TEST(Linear, MatchesNaiveWithAndWithoutBias) {
  Tensor x = randf({6, 5}, 31), w = randf({3, 5}, 32), b = randf({3}, 33);
  std::vector<double> ref = ref_matmul(x, w.t().contiguous());
  std::vector<double> bv = b.to_vector<double>();
  expect_close(linear(x, w), ref, 1e-5);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 3; ++j) ref[i * 3 + j] += bv[j];
  expect_close(linear(x, w, b), ref, 1e-5);
  Tensor y3 = linear(x.view({2, 3, 5}), w, b);  // leading dims flattened and restored
  EXPECT_EQ(y3.shape(), (Shape{2, 3, 3}));
  expect_close(y3, ref, 1e-5);
  Tensor y1 = linear(x.select(0, 1), w, b);
  EXPECT_EQ(y1.shape(), (Shape{3}));
  expect_close(y1, {ref[3], ref[4], ref[5]}, 1e-5);
}

TEST(Linear, NarrowOutputMatchesNaive) {  // n <= 16 takes the repacked-weight path under OpenBLAS
  Tensor x = randf({37, 128}, 34), w = randf({10, 128}, 35), b = randf({10}, 36);
  std::vector<double> ref = ref_matmul(x, w.t().contiguous());
  std::vector<double> bv = b.to_vector<double>();
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 10; ++j) ref[i * 10 + j] += bv[j];
  expect_close(linear(x, w, b), ref, 1e-4);
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Tensor x = rand_f64({4, 3}, 41).set_requires_grad(), w = rand_f64({2, 3}, 42).set_requires_grad();
  Tensor b = rand_f64({2}, 43).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  expect_gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w});
  // Non-contiguous x and weight, 3-D x.
  Tensor xt = rand_f64({3, 2, 2}, 44).set_requires_grad(), wt = rand_f64({3, 2}, 45).set_requires_grad();
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return linear(in[0].permute({1, 2, 0}), in[1].t(), in[2]); }, {xt, wt, b});
}

TEST(Linear, MixedHalfOnCpuComputesInFloat) {
  Tensor x = randf({4, 3}, 51), w = randf({2, 3}, 52);
  Tensor y = linear(x.to(DType::bf16), w.to(DType::bf16));
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_close(y, ref_matmul(x.to(DType::bf16), w.to(DType::bf16).t().contiguous()), 2e-2, 1e-2);
}

TEST(LinalgErrors, NameOpShapesAndExpectation) {
  VOLT_EXPECT_ERROR(matmul(zeros({2, 3}), zeros({4, 5})), "matmul", "(2, 3)", "(4, 5)", "a.size(-1)");
  VOLT_EXPECT_ERROR(matmul(zeros({2, 3}), zeros({3}, DType::f64)), "matmul", "float32", "float64");
  VOLT_EXPECT_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), "matmul", "broadcast");
  VOLT_EXPECT_ERROR(matmul(zeros({2}, DType::i64), zeros({2}, DType::i64)), "matmul", "floating");
  VOLT_EXPECT_ERROR(linear(zeros({2, 3}), zeros({4, 5})), "linear", "(2, 3)", "(4, 5)", "in_features");
  VOLT_EXPECT_ERROR(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})), "linear", "bias", "(5,)", "(4,)");
  VOLT_EXPECT_ERROR(linear(zeros({2, 3}), zeros({3})), "linear", "weight", "2-D");
}

TEST(Linalg, Tf32FlagRoundTrips) {
  EXPECT_FALSE(allow_tf32());
  set_allow_tf32(true);
  EXPECT_TRUE(allow_tf32());
  set_allow_tf32(false);
  EXPECT_FALSE(allow_tf32());
}

// The CUDA path (cuBLAS) against the CPU path; runs only where a GPU is present.
TEST(MatmulCuda, MatchesCpuForFloatTypesAndLayouts) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  Device gpu = cuda_device(0);
  Tensor a = randf({3, 5, 7}, 61), b = randf({7, 4}, 62), bt = randf({3, 4, 7}, 63);
  expect_close(matmul(a.to(gpu), b.to(gpu)).cpu(), matmul(a, b).to_vector<double>(), 1e-4);
  expect_close(matmul(a.to(gpu), bt.to(gpu).transpose(1, 2)).cpu(), matmul(a, bt.transpose(1, 2)).to_vector<double>(),
               1e-4);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor y = matmul(a.to(gpu, dt), b.to(gpu, dt));
    EXPECT_EQ(y.dtype(), dt);
    expect_close(y.cpu(), matmul(a.to(dt), b.to(dt)).to_vector<double>(), 3e-2, 2e-2);
  }
  Tensor x = randf({6, 5}, 64).set_requires_grad(), w = randf({3, 5}, 65).set_requires_grad();
  Tensor bias = randf({3}, 66).set_requires_grad();
  sum(linear(x, w, bias)).backward();
  Tensor xg = x.detach().to(gpu).set_requires_grad(), wg = w.detach().to(gpu).set_requires_grad();
  Tensor bg = bias.detach().to(gpu).set_requires_grad();
  sum(linear(xg, wg, bg)).backward();
  expect_close(xg.grad().cpu(), x.grad().to_vector<double>(), 1e-4);
  expect_close(wg.grad().cpu(), w.grad().to_vector<double>(), 1e-4);
  expect_close(bg.grad().cpu(), bias.grad().to_vector<double>(), 1e-4);
  VOLT_EXPECT_ERROR(matmul(a.to(gpu), b), "matmul", "cuda", "cpu");
}

// Narrow outputs (8 < n <= 16, x W^T) take the hand-written AVX2 kernel on the CPU: check it against a naive
// loop across row counts that exercise its 8-row blocks and single-row remainder, k not a multiple of 8, odd
// n (the 2-column tail block), with and without bias, and a batched matmul with a transposed operand.
TEST(LinalgNarrow, MatchesNaiveReference) {
  struct Case { int64_t m, n, k; bool bias; };
  for (Case cs : {Case{37, 10, 130, true}, Case{5, 16, 20, false}, Case{13, 9, 64, true}, Case{256, 10, 128, false},
                  Case{1, 11, 17, true}, Case{8, 15, 33, false}}) {
    Generator g(cs.m * 1000 + cs.n * 10 + cs.k);
    Tensor x = rand({cs.m, cs.k}, DType::f32, kCPU, &g, -1, 1);
    Tensor w = rand({cs.n, cs.k}, DType::f32, kCPU, &g, -1, 1);
    Tensor b = cs.bias ? rand({cs.n}, DType::f32, kCPU, &g, -1, 1) : Tensor();
    std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(),
                       bv = cs.bias ? b.to_vector<float>() : std::vector<float>{};
    std::vector<float> out = linear(x, w, b).to_vector<float>();
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        double ref = cs.bias ? bv[j] : 0.0;
        for (int64_t p = 0; p < cs.k; ++p) ref += double(xv[i * cs.k + p]) * wv[j * cs.k + p];
        ASSERT_NEAR(out[i * cs.n + j], ref, 1e-4 * (1 + std::abs(ref)))
            << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " at (" << i << ", " << j << ")";
      }
  }
  // Batched: (3, 7, 24) @ (3, 12, 24)^T.
  Generator g(5);
  Tensor a = rand({3, 7, 24}, DType::f32, kCPU, &g), bt = rand({3, 12, 24}, DType::f32, kCPU, &g);
  std::vector<float> av = a.to_vector<float>(), bv = bt.to_vector<float>();
  std::vector<float> out = matmul(a, bt.transpose(1, 2)).to_vector<float>();
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 12; ++j) {
        double ref = 0;
        for (int64_t p = 0; p < 24; ++p) ref += double(av[(s * 7 + i) * 24 + p]) * bv[(s * 12 + j) * 24 + p];
        ASSERT_NEAR(out[(s * 7 + i) * 12 + j], ref, 1e-4 * (1 + std::abs(ref)));
      }
}

}  // namespace
}  // namespace volt

