// Volt's GEMM for small f32 outputs (kernels/common/small_gemm.h, kernels/cuda/small_gemm.cu). On every
// machine: how a product is cut (tiles, k slices), which products the kernel takes, and the arithmetic of
// small_gemm::reference (the kernel's order of operations, run on the host) against a double-precision product
// over transposes, leading dimensions, alpha/beta and the linear epilogue. Where a GPU is present: the kernel's
// results equal reference() bit for bit, through the backend and through matmul/linear, and agree with cuBLAS.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include <volt/kernels/backend/linalg.h>
#include <volt/kernels/backend/registry.h>
#include <volt/kernels/common/small_gemm.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

namespace sg = volt::small_gemm;
using testing::expect_close;

// ---- the cut ---------------------------------------------------------------------------------------------------

void check_plan(int64_t m, int64_t n, int64_t k, int sms) {
  SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " sms=" + std::to_string(sms));
  const sg::Plan p = sg::plan(m, n, k, sms);
  EXPECT_EQ(p.tiles_m, (m + sg::kTile - 1) / sg::kTile);
  EXPECT_EQ(p.tiles_n, (n + sg::kTile - 1) / sg::kTile);
  ASSERT_GE(p.splits, 1);
  EXPECT_LE(p.splits, sg::kMaxSplits);
  EXPECT_EQ(p.k_per_split % sg::kSlab, 0);
  // The slices cover [0, k) in order, and none is empty.
  EXPECT_EQ(p.k_begin(0), 0);
  for (int64_t s = 0; s < p.splits; ++s) {
    EXPECT_LT(p.k_begin(s), p.k_end(s, k));
    if (s + 1 < p.splits) {
      EXPECT_EQ(p.k_end(s, k), p.k_begin(s + 1));
    }
  }
  EXPECT_EQ(p.k_end(p.splits - 1, k), k);
  // Enough blocks for the GPU unless k has run out of slabs or the split cap is reached: the slices asked for
  // (w) have ceil(slabs / w) slabs each, so rounding to whole slabs leaves more than w / 2 of them.
  const int64_t slabs = (k + sg::kSlab - 1) / sg::kSlab, tiles = p.tiles_m * p.tiles_n;
  const int64_t target = int64_t{sg::kBlocksPerSm} * sms;
  const int64_t w = std::min<int64_t>({(target + tiles - 1) / tiles, sg::kMaxSplits, slabs});
  EXPECT_EQ(p.k_per_split, (slabs + w - 1) / w * sg::kSlab);
  EXPECT_GT(2 * p.splits, w);
  if (slabs % w == 0) EXPECT_EQ(p.splits, w);
  if (w == (target + tiles - 1) / tiles && slabs % w == 0) EXPECT_GE(tiles * p.splits, target) << "too few blocks";
}

TEST(SmallGemmPlan, SlicesCoverKAndFillTheGpu) {
  for (int sms : {1, 78, 132, 144})
    for (int64_t m : {1, 10, 31, 32, 33, 256, 1000})
      for (int64_t n : {1, 10, 128, 784})
        for (int64_t k : {1, 10, 31, 32, 33, 256, 784, 4096}) check_plan(m, n, k, sms);
}

// The 784-128-10 MLP's products at batch 256 on a 132-SM H100, worked by hand.
TEST(SmallGemmPlan, MlpShapesOnAnH100) {
  // l1 forward: 256 x 128 from k = 784. 32 tiles; 264 / 32 -> 9 slices of 3 slabs (96), 9 * 96 >= 784.
  sg::Plan p = sg::plan(256, 128, 784, 132);
  EXPECT_EQ(p.tiles_m, 8);
  EXPECT_EQ(p.tiles_n, 4);
  EXPECT_EQ(p.splits, 9);
  EXPECT_EQ(p.k_per_split, 96);
  // The last layer's weight gradient: 10 x 128 from k = 256. 4 tiles want 66 slices; k has 8 slabs.
  p = sg::plan(10, 128, 256, 132);
  EXPECT_EQ(p.tiles_m, 1);
  EXPECT_EQ(p.tiles_n, 4);
  EXPECT_EQ(p.splits, 8);
  EXPECT_EQ(p.k_per_split, 32);
  // The hidden layer's input gradient: k = 10 is one slab, so one slice.
  p = sg::plan(256, 128, 10, 132);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.k_per_split, 32);
  // The first layer's weight gradient: 128 x 784 from k = 256: 100 tiles, 3 slices (3 slabs; the last 2).
  p = sg::plan(128, 784, 256, 132);
  EXPECT_EQ(p.tiles_m * p.tiles_n, 100);
  EXPECT_EQ(p.splits, 3);
  EXPECT_EQ(p.k_per_split, 96);
  EXPECT_EQ(p.k_end(2, 256), 256);
}

TEST(SmallGemmPlan, SuitsSmallUnbatchedProductsOnly) {
  EXPECT_TRUE(sg::suits(256, 128, 784, 1));
  EXPECT_TRUE(sg::suits(128, 784, 256, 1));
  EXPECT_TRUE(sg::suits(1, 1, 1, 1));
  EXPECT_TRUE(sg::suits(512, 512, 128, 1));  // exactly kMaxOutput and kMaxWork
  EXPECT_FALSE(sg::suits(512, 512, 129, 1));
  EXPECT_FALSE(sg::suits(1024, 1024, 1, 1));  // the output alone fills the GPU
  EXPECT_TRUE(sg::suits(sg::kMaxOutput, 1, 3, 1));
  EXPECT_FALSE(sg::suits(sg::kMaxOutput + 1, 1, 1, 1));
  EXPECT_FALSE(sg::suits(256, 128, 784, 2));  // batched: cuBLAS's strided batch
  EXPECT_FALSE(sg::suits(0, 128, 784, 1));
  EXPECT_FALSE(sg::suits(256, 128, 0, 1));
  EXPECT_TRUE(sg::suits(1, 1, sg::kMaxK, 1));
  EXPECT_FALSE(sg::suits(1, 1, sg::kMaxK + 1, 1));
  const int64_t big = std::numeric_limits<int32_t>::max();
  EXPECT_FALSE(sg::suits(big, big, 2, 1));  // no overflow on the way to the answer
  EXPECT_FALSE(sg::suits(big, 1, 1, 1));
}

// ---- the arithmetic (host) -------------------------------------------------------------------------------------

// A stored operand for op(X) of shape (rows, cols): X itself (rows, cols) or, when trans, X^T stored (cols, rows);
// `pad` extra elements per stored row.
struct Stored {
  std::vector<float> v;
  int64_t ld = 0;
};

Stored make(int64_t rows, int64_t cols, bool trans, int64_t pad, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t r = trans ? cols : rows, c = trans ? rows : cols;
  Stored s;
  s.ld = c + pad;
  s.v.resize(static_cast<size_t>(r * s.ld));
  for (float& x : s.v) x = u(gen);
  return s;
}

double op_at(const Stored& s, bool trans, int64_t i, int64_t j) {
  return trans ? s.v[static_cast<size_t>(j * s.ld + i)] : s.v[static_cast<size_t>(i * s.ld + j)];
}

// The arguments of op(A) (m, k) @ op(B) (k, n) into c (leading dimension ldc), operands as stored.
sg::Args args(const Stored& A, const Stored& B, int64_t m, int64_t n, int64_t k, bool ta, bool tb, float* c,
              int64_t ldc) {
  sg::Args g;
  g.a = A.v.data();
  g.b = B.v.data();
  g.c = c;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = ta;
  g.trans_b = tb;
  g.lda = A.ld;
  g.ldb = B.ld;
  g.ldc = ldc;
  return g;
}

// The backend's description of the same product.
GemmDesc desc(const sg::Args& g) {
  GemmDesc d;
  d.m = g.m;
  d.n = g.n;
  d.k = g.k;
  d.trans_a = g.trans_a;
  d.trans_b = g.trans_b;
  d.lda = g.lda;
  d.ldb = g.ldb;
  d.ldc = g.ldc;
  d.alpha = g.alpha;
  d.beta = g.beta;
  return d;
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  int64_t pad;
  int sms;
};

std::string name(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " ta=" +
         std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " pad=" + std::to_string(c.pad) +
         " sms=" + std::to_string(c.sms);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      out.push_back({37, 45, 70, ta, tb, 0, 132});    // ragged tiles, 3 slabs, several slices
      out.push_back({10, 128, 256, ta, tb, 3, 132});  // the MLP's last weight gradient
      out.push_back({64, 33, 5, ta, tb, 1, 132});     // k shorter than a slab
      out.push_back({5, 7, 300, ta, tb, 0, 1});       // one SM: 2 slices of 160
    }
  return out;
}

TEST(SmallGemmReference, GemmMatchesADoubleProductWithAlphaAndBeta) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const Stored A = make(c.m, c.k, c.ta, c.pad, 1), B = make(c.k, c.n, c.tb, c.pad, 2);
    const sg::Plan p = sg::plan(c.m, c.n, c.k, c.sms);
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.25f}}) {
      const int64_t ldc = c.n + c.pad;
      std::vector<float> C(static_cast<size_t>(c.m * ldc));
      std::mt19937_64 gen(3);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& x : C) x = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(gen);  // beta 0: never read
      const std::vector<float> C0 = C;
      sg::Args g = args(A, B, c.m, c.n, c.k, c.ta, c.tb, C.data(), ldc);
      g.alpha = alpha;
      g.beta = beta;
      sg::reference<false>(g, p);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          if (j >= c.n) {  // the padding between rows is left alone
            EXPECT_TRUE(std::isnan(C[at]) == std::isnan(C0[at]) && (std::isnan(C[at]) || C[at] == C0[at]));
            continue;
          }
          double want = 0;
          for (int64_t kk = 0; kk < c.k; ++kk) want += op_at(A, c.ta, i, kk) * op_at(B, c.tb, kk, j);
          want = alpha * want + (beta == 0.0f ? 0.0 : beta * double(C0[at]));
          ASSERT_NEAR(C[at], want, 2e-6 * double(c.k) + 1e-6) << "(" << i << ", " << j << ")";
        }
    }
  }
}

TEST(SmallGemmReference, LinearAddsBiasAppliesTheActivationAndKeepsThePreActivation) {
  const int64_t m = 40, n = 50, k = 100;
  const Stored X = make(m, k, false, 0, 4), W = make(k, n, true, 0, 5);  // x @ w^T with w stored (n, k)
  std::vector<float> bias(n);
  for (int64_t j = 0; j < n; ++j) bias[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j) - 0.2f;
  const sg::Plan p = sg::plan(m, n, k, 132);
  ASSERT_GT(p.splits, 1);
  for (Activation act : {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(activation_name(act)) + (with_bias ? " bias" : " no bias"));
      std::vector<float> out(static_cast<size_t>(m * n)), pre(static_cast<size_t>(m * n));
      sg::Args g = args(X, W, m, n, k, false, true, out.data(), n);
      g.bias = with_bias ? bias.data() : nullptr;
      g.pre = pre.data();
      biasact::with_activation(act, [&](auto ac) { sg::reference<true, decltype(ac)::value>(g, p); });
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double z = with_bias ? bias[static_cast<size_t>(j)] : 0.0;
          for (int64_t kk = 0; kk < k; ++kk) z += op_at(X, false, i, kk) * op_at(W, true, kk, j);
          const size_t at = static_cast<size_t>(i * n + j);
          ASSERT_NEAR(pre[at], z, 1e-5) << "(" << i << ", " << j << ")";
          double want = z;
          if (act == Activation::ReLU) want = z > 0 ? z : 0;
          if (act == Activation::GELU) want = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
          if (act == Activation::GELUTanh)
            want = 0.5 * z * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (z + 0.044715 * z * z * z)));
          ASSERT_NEAR(out[at], want, 1e-5) << "(" << i << ", " << j << ")";
          if (act == Activation::ReLU) {
            ASSERT_EQ(out[at], pre[at] > 0 ? pre[at] : 0.0f);  // exactly: the output is the clipped z
          }
        }
    }
  }
}

// One slice is the plain fused multiply-add chain; several slices are added in slice order. The values make
// the order visible: slices whose sums are 1e8, 1 and -1e8 give exactly 0 in f32 only when added in order
// (1e8 + 1 rounds back to 1e8).
TEST(SmallGemmReference, OneSliceIsTheFmaChainAndSlicesAddInOrder) {
  {
    const Stored A = make(3, 20, false, 0, 6), B = make(20, 4, false, 0, 7);
    std::vector<float> C(12);
    const sg::Args g = args(A, B, 3, 4, 20, false, false, C.data(), 4);
    const sg::Plan p = sg::plan(3, 4, 20, 132);
    ASSERT_EQ(p.splits, 1);
    sg::reference<false>(g, p);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < 20; ++kk) acc = std::fma(A.v[i * 20 + kk], B.v[kk * 4 + j], acc);
        EXPECT_EQ(C[static_cast<size_t>(i * 4 + j)], acc);
      }
  }
  const int64_t k = 3 * sg::kSlab;
  std::vector<float> a(static_cast<size_t>(k), 0.0f), b(static_cast<size_t>(k), 1.0f), c(1);
  a[0] = 1e8f;
  a[static_cast<size_t>(sg::kSlab)] = 1.0f;
  a[static_cast<size_t>(2 * sg::kSlab)] = -1e8f;
  sg::Args g;
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  g.m = 1;
  g.n = 1;
  g.k = k;
  g.lda = k;
  g.ldb = 1;
  g.ldc = 1;
  const sg::Plan p = sg::plan(1, 1, k, 132);
  ASSERT_EQ(p.splits, 3);
  sg::reference<false>(g, p);
  EXPECT_EQ(c[0], 0.0f);
}

TEST(SmallGemm, SwitchRoundTrips) {
  EXPECT_TRUE(cuda_small_gemm());
  set_cuda_small_gemm(false);
  EXPECT_FALSE(cuda_small_gemm());
  set_cuda_small_gemm(true);
  EXPECT_TRUE(cuda_small_gemm());
}

TEST(SmallGemm, MultiprocessorCountNeedsAUsableGpu) {
  if (cuda_available()) {
    EXPECT_GT(cuda_multiprocessor_count(0), 0);
    VOLT_EXPECT_ERROR(cuda_multiprocessor_count(cuda_device_count()), "cuda_multiprocessor_count", "does not exist");
  } else {
    VOLT_EXPECT_ERROR(cuda_multiprocessor_count(0), "cuda_multiprocessor_count");
  }
}

// ---- the kernel (GPU hosts) ------------------------------------------------------------------------------------

struct SmallGemmOff {
  SmallGemmOff() { set_cuda_small_gemm(false); }
  ~SmallGemmOff() { set_cuda_small_gemm(true); }
};

Tensor host_tensor(const std::vector<float>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())});
}

bool same_bits(const std::vector<float>& x, const Tensor& y) {
  const Tensor t = y.cpu().contiguous();
  return static_cast<int64_t>(x.size()) == t.numel() && std::memcmp(x.data(), t.data_ptr(), t.nbytes()) == 0;
}

// Through the backend with explicit layouts, alpha and beta: the GPU's C equals reference()'s bit for bit
// (including the untouched padding), and cuBLAS's within rounding.
TEST(SmallGemmCuda, GemmEqualsTheReferenceBitForBit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  const Device gpu = cuda_device(0);
  const int sms = cuda_multiprocessor_count(0);
  std::vector<Case> all = cases();
  all.push_back({256, 128, 784, false, true, 0, 0});  // the MLP's products
  all.push_back({10, 128, 256, true, false, 0, 0});
  all.push_back({128, 784, 256, true, false, 0, 0});
  for (const Case& c : all) {
    SCOPED_TRACE(name(c));
    const Stored A = make(c.m, c.k, c.ta, c.pad, 11), B = make(c.k, c.n, c.tb, c.pad, 12);
    const int64_t ldc = c.n + c.pad;
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {-2.0f, 0.25f}}) {
      std::vector<float> C(static_cast<size_t>(c.m * ldc));
      for (size_t i = 0; i < C.size(); ++i) C[i] = 0.001f * static_cast<float>(i % 997);
      const Tensor a = host_tensor(A.v).to(gpu), b = host_tensor(B.v).to(gpu), cg = host_tensor(C).to(gpu);
      sg::Args g = args(A, B, c.m, c.n, c.k, c.ta, c.tb, C.data(), ldc);
      g.alpha = alpha;
      g.beta = beta;
      const GemmDesc d = desc(g);
      const Tensor cublas = cg.clone();
      backend::call<&backend::LinalgKernels::gemm>(gpu, DType::f32, d, a, b, cg);
      GemmDesc dc = d;
      dc.small_gemm = false;
      backend::call<&backend::LinalgKernels::gemm>(gpu, DType::f32, dc, a, b, cublas);
      sg::reference<false>(g, sg::plan(c.m, c.n, c.k, sms));
      EXPECT_TRUE(same_bits(C, cg)) << "alpha " << alpha << " beta " << beta;
      std::vector<double> want(C.begin(), C.end());
      expect_close(cublas.cpu(), want, 2e-6 * double(c.k) + 1e-6, 1e-5);
    }
  }
}

// The linear layer's forward (bias, activation, pre-activation) and its use in a training step: matmul and
// linear on CUDA tensors take the kernel, and equal reference() (None, ReLU) or agree with it (the GELUs, whose
// erf/tanh differ between the CPU's libm and CUDA's).
TEST(SmallGemmCuda, LinearEqualsTheReferenceAndTrainsLikeCublas) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  const Device gpu = cuda_device(0);
  const int sms = cuda_multiprocessor_count(0);
  const int64_t m = 256, n = 128;
  std::vector<float> bias(n);
  for (int64_t j = 0; j < n; ++j) bias[static_cast<size_t>(j)] = 0.003f * static_cast<float>(j) - 0.2f;
  const Tensor bg = host_tensor(bias).to(gpu);
  // Through the backend with the pre-activation written (as the GELU backward needs it), k = 784 (9 slices and
  // the fold) and k = 20 (one slice: the tile kernel finishes), with and without bias; then through linear().
  for (int64_t k : {784, 20}) {
    const Stored X = make(m, k, false, 0, 21), W = make(k, n, true, 0, 22);
    const Tensor x = host_tensor(X.v).reshape({m, k}).to(gpu), w = host_tensor(W.v).reshape({n, k}).to(gpu);
    for (Activation act : {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(std::string(activation_name(act)) + " k=" + std::to_string(k) + (with_bias ? " bias" : ""));
        std::vector<float> out(static_cast<size_t>(m * n)), pre(static_cast<size_t>(m * n));
        sg::Args g = args(X, W, m, n, k, false, true, out.data(), n);
        g.bias = with_bias ? bias.data() : nullptr;
        g.pre = pre.data();
        biasact::with_activation(act,
                                 [&](auto ac) { sg::reference<true, decltype(ac)::value>(g, sg::plan(m, n, k, sms)); });
        const GemmDesc d = desc(g);
        const Tensor y = empty({m, n}, DType::f32, gpu), p = empty({m, n}, DType::f32, gpu);
        backend::call<&backend::LinalgKernels::linear_act_fwd>(gpu, DType::f32, d, x, w,
                                                                 with_bias ? bg : Tensor(), y, p, act);
        EXPECT_TRUE(same_bits(pre, p));
        const std::vector<double> want(out.begin(), out.end());
        if (act == Activation::None || act == Activation::ReLU) {
          EXPECT_TRUE(same_bits(out, y));
          EXPECT_TRUE(same_bits(out, linear(x, w, with_bias ? bg : Tensor(), act)));
        } else {  // erf / tanh: CUDA's and the CPU's libm differ in the last bits
          expect_close(y.cpu(), want, 1e-6, 1e-5);
          expect_close(linear(x, w, with_bias ? bg : Tensor(), act).cpu(), want, 1e-6, 1e-5);
        }
        SmallGemmOff off;
        expect_close(linear(x, w, with_bias ? bg : Tensor(), act).cpu(), want, 1e-4, 1e-4);
      }
    }
  }
  const int64_t k = 784;
  const Stored X = make(m, k, false, 0, 21), W = make(k, n, true, 0, 22);
  const Tensor x = host_tensor(X.v).reshape({m, k}).to(gpu), w = host_tensor(W.v).reshape({n, k}).to(gpu);
  // The same layer with its gradients, both routes: the kernel takes the forward and the weight gradient.
  Tensor weighting = host_tensor(std::vector<float>(static_cast<size_t>(m * n), 0.5f)).reshape({m, n}).to(gpu);
  auto grads = [&] {
    Tensor xx = x.detach().set_requires_grad(), ww = w.detach().set_requires_grad(), bb = bg.detach().set_requires_grad();
    sum(mul(linear(xx, ww, bb, Activation::ReLU), weighting)).backward();
    return std::vector<Tensor>{xx.grad(), ww.grad(), bb.grad()};
  };
  const std::vector<Tensor> mine = grads();
  std::vector<Tensor> theirs;
  {
    SmallGemmOff off;
    theirs = grads();
  }
  for (size_t i = 0; i < mine.size(); ++i) expect_close(mine[i].cpu(), theirs[i].cpu().to_vector<double>(), 1e-4, 1e-4);
}

}  // namespace
}  // namespace volt
