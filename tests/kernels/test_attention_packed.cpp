// causal_self_attention_packed (kernels/attention_packed.h): on the CPU exactly the composition it is defined by
// (values and gradients), its argument errors, the backward layouts it hands cuDNN (kernels/common/flash_attention.h),
// and, where a GPU with cuDNN's SDPA is present, the cuDNN path against the composition on the same GPU (the *Cuda*
// cases scripts/gpu_check.sh runs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include "common/sdpa_test_util.h"
#include <volt/kernels/attention_packed.h>
#include <volt/kernels/common/flash_attention.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/sdpa_path.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

using testing::DisableCudnnSdpa;
using testing::expect_close_rel;
using testing::max_abs_diff;

// What GPT2Attention ran before the packed op.
Tensor composition(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  auto head = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, H, C / H}).transpose(1, 2); };
  Tensor y = scaled_dot_product_attention(head(0), head(1), head(2), Tensor(), 0.0, true);
  return y.transpose(1, 2).reshape({B, T, C});
}

Tensor uniform(const Shape& shape, uint64_t seed, DType dt, Device dev) {
  Generator g(seed);
  return rand(shape, DType::f32, kCPU, &g, -1.0, 1.0).to(dt).to(dev);
}

struct AttnRun {
  Tensor out, grad;
};

// Forward, and backward of sum(out * w), from a fresh leaf with qkv0's values.
template <typename F>
AttnRun run(F&& attention, const Tensor& qkv0, const Tensor& w) {
  Tensor qkv = qkv0.detach().requires_grad_();
  AttnRun r;
  r.out = attention(qkv);
  sum(mul(r.out, w)).backward();
  r.out = r.out.detach();
  r.grad = qkv.grad();
  return r;
}

TEST(CausalSelfAttentionPacked, EqualsTheCompositionOnTheCpu) {
  struct Case {
    int64_t B, T, H, D;
  };
  for (const Case& c : std::vector<Case>{{2, 5, 3, 4}, {1, 7, 2, 8}, {3, 1, 1, 6}, {2, 16, 4, 16}}) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " D " +
                   std::to_string(c.D) + " " + dtype_name(dt));
      const int64_t C = c.H * c.D;
      Tensor qkv = uniform({c.B, c.T, 3 * C}, 11, dt, kCPU);
      Tensor w = uniform({c.B, c.T, C}, 12, dt, kCPU);
      const int64_t H = c.H;
      AttnRun packed = run([&](const Tensor& x) { return causal_self_attention_packed(x, H); }, qkv, w);
      AttnRun composed = run([&](const Tensor& x) { return composition(x, H); }, qkv, w);
      EXPECT_EQ(packed.out.shape(), (Shape{c.B, c.T, C}));
      EXPECT_EQ(packed.out.dtype(), dt);
      EXPECT_EQ(packed.grad.shape(), qkv.shape());
      EXPECT_EQ(max_abs_diff(packed.out, composed.out), 0.0);
      EXPECT_EQ(max_abs_diff(packed.grad, composed.grad), 0.0);
    }
  }
}

TEST(CausalSelfAttentionPacked, CausalAndScaledByOneOverSqrtD) {
  // One head, D = 4, T = 2: query 0 sees only key 0 (out = v0); query 1 weighs keys 0 and 1 by softmax(q1.k / 2).
  Tensor qkv = from_vector<double>({1, 0, 0, 0, /*k0*/ 2, 0, 0, 0, /*v0*/ 1, 2, 3, 4,  //
                                    1, 0, 0, 0, /*k1*/ 0, 0, 0, 0, /*v1*/ 5, 6, 7, 8},
                                   {1, 2, 12});
  Tensor y = causal_self_attention_packed(qkv, 1);
  const double a = std::exp(2.0 / 2.0), b = 1.0, w0 = a / (a + b), w1 = b / (a + b);
  testing::expect_close(y, {1, 2, 3, 4, w0 * 1 + w1 * 5, w0 * 2 + w1 * 6, w0 * 3 + w1 * 7, w0 * 4 + w1 * 8}, 1e-12,
                        1e-12);
}

TEST(CausalSelfAttentionPacked, SecondDerivativeOnTheCpu) {
  Tensor qkv = uniform({1, 3, 12}, 13, DType::f64, kCPU).requires_grad_();
  Tensor ref = qkv.detach().requires_grad_();
  Tensor g1 = autograd::grad(sum(mul(causal_self_attention_packed(qkv, 2), causal_self_attention_packed(qkv, 2))),
                             qkv, Tensor(), {.create_graph = true});
  Tensor g2 =
      autograd::grad(sum(mul(composition(ref, 2), composition(ref, 2))), ref, Tensor(), {.create_graph = true});
  EXPECT_EQ(max_abs_diff(autograd::grad(sum(mul(g1, g1)), qkv), autograd::grad(sum(mul(g2, g2)), ref)), 0.0);
}

TEST(CausalSelfAttentionPacked, BadInputNamesTheProblem) {
  Tensor x3 = zeros({2, 5, 36});
  VOLT_EXPECT_ERROR(causal_self_attention_packed(zeros({5, 36}), 3), "causal_self_attention_packed", "qkv",
                    "(B, T, 3C)", "(5, 36)");
  VOLT_EXPECT_ERROR(causal_self_attention_packed(zeros({2, 5, 30}), 4), "causal_self_attention_packed",
                    "(2, 5, 30)", "n_head = 4", "multiple of 12");
  VOLT_EXPECT_ERROR(causal_self_attention_packed(x3, 0), "causal_self_attention_packed", "n_head", "got 0");
  VOLT_EXPECT_ERROR(causal_self_attention_packed(zeros({2, 5, 36}, DType::i64), 3), "causal_self_attention_packed",
                    "floating point", "int64");
  VOLT_EXPECT_ERROR(causal_self_attention_packed(Tensor(), 3), "causal_self_attention_packed", "undefined");
}

// The layouts the backward graph uses: today's defaults for scaled_dot_product_attention (dO as out, dQ, dK, dV
// contiguous), the given ones for the packed op (dQ, dK, dV with q's, k's and v's strides into one (B, T, 3C)).
TEST(CausalSelfAttentionPacked, BackwardLayoutsDefaultToContiguousGradients) {
  const int64_t B = 2, T = 16, H = 4, D = 64, C = H * D;
  FlashAttnParams p;
  p.q = {{B, H, T, D}, {T * 3 * C, D, 3 * C, 1}};
  p.k = p.q;
  p.v = p.q;
  p.o = {{B, H, T, D}, {T * C, D, C, 1}};
  FlashAttnGradLayouts g = flash_attention_grad_layouts(p);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(g.d_o.stride[i], p.o.stride[i]);
    EXPECT_EQ(g.dq.dim[i], p.q.dim[i]);
  }
  const std::vector<int64_t> contiguous{H * T * D, T * D, D, 1};
  for (const FlashAttnTensor* t : {&g.dq, &g.dk, &g.dv})
    EXPECT_EQ(std::vector<int64_t>(t->stride, t->stride + 4), contiguous);
  p.dq = p.q;
  p.dk = p.k;
  p.dv = p.v;
  g = flash_attention_grad_layouts(p);
  const std::vector<int64_t> packed{T * 3 * C, D, 3 * C, 1};
  for (const FlashAttnTensor* t : {&g.dq, &g.dk, &g.dv})
    EXPECT_EQ(std::vector<int64_t>(t->stride, t->stride + 4), packed);
}

// ---- on a GPU -------------------------------------------------------------------------------------------------

TEST(CausalSelfAttentionPackedCuda, CudnnWritesStraightIntoTheProjectionsLayout) {
  SKIP_WITHOUT_CUDNN_SDPA();
  const Device gpu = cuda_device(0);
  const int64_t B = 2, T = 128, H = 4, D = 64, C = H * D;
  Tensor qkv = uniform({B, T, 3 * C}, 21, DType::bf16, gpu);
  Tensor w = uniform({B, T, C}, 22, DType::bf16, gpu);
  reset_sdpa_stats();
  AttnRun packed = run([&](const Tensor& x) { return causal_self_attention_packed(x, H); }, qkv, w);
  SdpaStats s = sdpa_stats();
  ASSERT_EQ(s.cudnn, 1) << "cuDNN did not run: " << s.last_fallback_reason;
  EXPECT_EQ(s.fused, 0);
  EXPECT_EQ(packed.out.dtype(), DType::bf16);
  EXPECT_EQ(packed.out.shape(), (Shape{B, T, C}));
  EXPECT_EQ(packed.grad.shape(), qkv.shape());
  // The composition through cuDNN (contiguous out and gradients, then copies) and through Volt's kernel.
  AttnRun composed = run([&](const Tensor& x) { return composition(x, H); }, qkv, w);
  EXPECT_EQ(sdpa_stats().cudnn, 2) << sdpa_stats().last_fallback_reason;
  expect_close_rel(packed.out, composed.out, 1e-2, "out vs cuDNN composition");
  expect_close_rel(packed.grad, composed.grad, 1e-2, "d qkv vs cuDNN composition");
  AttnRun fused;
  {
    DisableCudnnSdpa off;
    fused = run([&](const Tensor& x) { return causal_self_attention_packed(x, H); }, qkv, w);
  }
  EXPECT_EQ(sdpa_stats().fused, 1);
  EXPECT_EQ(sdpa_stats().last_fallback_reason, "VOLT_DISABLE_CUDNN_SDPA is set");
  expect_close_rel(packed.out, fused.out, 2e-2, "out vs Volt's kernel");
  expect_close_rel(packed.grad, fused.grad, 2e-2, "d qkv vs Volt's kernel");
  // Every gradient element was written (the buffer is not zeroed first): no NaN from uninitialised memory.
  EXPECT_TRUE(std::isfinite(sum(packed.grad.to(DType::f32)).item()));
}

TEST(CausalSelfAttentionPackedCuda, AutocastAndInferenceAndRefusals) {
  SKIP_WITHOUT_CUDNN_SDPA();
  const Device gpu = cuda_device(0);
  const int64_t B = 1, T = 32, H = 2, D = 32, C = H * D;
  Tensor qkv = uniform({B, T, 3 * C}, 23, DType::f32, gpu);
  Tensor w = uniform({B, T, C}, 24, DType::f32, gpu);
  reset_sdpa_stats();
  AttnRun mixed;
  {
    AutocastGuard on(true, DType::bf16);  // f32 qkv lowered to bf16: cuDNN; the gradient comes back in f32
    mixed = run([&](const Tensor& x) { return causal_self_attention_packed(x, H); }, qkv, w);
  }
  EXPECT_EQ(sdpa_stats().cudnn, 1) << sdpa_stats().last_fallback_reason;
  EXPECT_EQ(mixed.out.dtype(), DType::bf16);
  EXPECT_EQ(mixed.grad.dtype(), DType::f32);
  AttnRun ref = run([&](const Tensor& x) { return composition(x, H); }, qkv, w);  // f32, Volt's kernel
  expect_close_rel(mixed.out, ref.out, 2e-2, "autocast out");
  expect_close_rel(mixed.grad, ref.grad, 2e-2, "autocast d qkv");
  Tensor y = causal_self_attention_packed(qkv.to(DType::bf16), H);  // no grad: no stats, no backward plan
  EXPECT_EQ(sdpa_stats().cudnn, 2);
  expect_close_rel(y, ref.out, 2e-2, "inference out");
  causal_self_attention_packed(uniform({1, 8, 3 * 3 * 4}, 25, DType::bf16, gpu), 3);  // D = 4: Volt's kernel
  EXPECT_EQ(sdpa_stats().cudnn, 2);
  EXPECT_NE(sdpa_stats().last_fallback_reason.find("head dims"), std::string::npos)
      << sdpa_stats().last_fallback_reason;
}

}  // namespace
}  // namespace volt
