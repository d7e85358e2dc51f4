// cuDNN's fused SDPA inside scaled_dot_product_attention (kernels/sdpa_path.h): the host decision of when a call
// may go to cuDNN and the (b, h, s, d) views cuDNN reads (kernels/common/flash_attention.h), both plain functions
// tested here on the CPU; the path counters; and, where a GPU and a build with the cuDNN frontend are present, the
// cuDNN forward and backward against Volt's own kernel on the same GPU (the *Cuda* cases scripts/gpu_check.sh runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include "common/sdpa_test_util.h"
#include <volt/config.h>
#include <volt/kernels/common/flash_attention.h>
#include <volt/kernels/grad.h>
#include <volt/kernels/kernel_support.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/sdpa_path.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

using testing::DisableCudnnSdpa;
using testing::expect_close_rel;
using testing::max_abs_diff;

// GPT-2 124M's attention on an H100: bf16, 64-wide heads, causal, no mask, no dropout.
FlashAttnRequest gpt2_request() {
  FlashAttnRequest r;
  r.dtype = DType::bf16;
  r.batch = 8 * 12;
  r.q_len = r.k_len = 1024;
  r.head_dim_qk = r.head_dim_v = 64;
  r.compute_capability = 90;
  return r;
}

void expect_refused(const FlashAttnRequest& r, const std::string& part) {
  const std::string why = flash_attention_refusal(r);
  EXPECT_NE(why.find(part), std::string::npos) << "refusal: '" << why << "', expected it to mention '" << part << "'";
}

TEST(FlashAttentionSupport, TakesGpt2sAttention) {
  EXPECT_EQ(flash_attention_refusal(gpt2_request()), "");
  FlashAttnRequest r = gpt2_request();
  r.dtype = DType::f16;
  r.compute_capability = 80;
  r.q_len = 5;  // L != S: top-left causal, as the fallback
  r.k_len = 7;
  EXPECT_EQ(flash_attention_refusal(r), "");
}

TEST(FlashAttentionSupport, RefusesWhatCudnnDoesNotDo) {
  FlashAttnRequest r = gpt2_request();
  r.dtype = DType::f32;
  expect_refused(r, "dtype float32");
  r = gpt2_request(), r.dtype = DType::f64;
  expect_refused(r, "float64");
  r = gpt2_request(), r.compute_capability = 75;
  expect_refused(r, "compute capability 7.5");
  r = gpt2_request(), r.compute_capability = 0;
  expect_refused(r, "not a CUDA device");
  r = gpt2_request(), r.has_mask = true;
  expect_refused(r, "attn_mask");
  r = gpt2_request(), r.dropout_p = 0.1;
  expect_refused(r, "dropout_p");
  r = gpt2_request(), r.need_weights = true;
  expect_refused(r, "weights");
  r = gpt2_request(), r.batch_dims_match = false;
  expect_refused(r, "batch dims");
  r = gpt2_request(), r.q_len = 0;
  expect_refused(r, "empty");
  r = gpt2_request(), r.batch = 0;
  expect_refused(r, "empty");
}

TEST(FlashAttentionSupport, HeadDimsByDevice) {
  EXPECT_EQ(flash_attention_max_head_dim(75), 0);
  EXPECT_EQ(flash_attention_max_head_dim(80), 128);
  EXPECT_EQ(flash_attention_max_head_dim(86), 128);
  EXPECT_EQ(flash_attention_max_head_dim(90), 256);
  EXPECT_EQ(flash_attention_max_head_dim(100), 128);
  FlashAttnRequest r = gpt2_request();
  for (int64_t d : {8, 16, 72, 128, 256}) {
    r.head_dim_qk = r.head_dim_v = d;
    EXPECT_EQ(flash_attention_refusal(r), "") << d;
  }
  r.head_dim_qk = r.head_dim_v = 60;  // not a multiple of 8
  expect_refused(r, "head dims 60 (q, k) and 60 (v)");
  r.head_dim_qk = 64, r.head_dim_v = 264;
  expect_refused(r, "multiples of 8 up to 256");
  r = gpt2_request(), r.compute_capability = 80, r.head_dim_qk = r.head_dim_v = 256;  // Ampere: 128 at most
  expect_refused(r, "up to 128");
}

TEST(FlashAttentionSupport, CudnnVersion) {
  EXPECT_EQ(flash_attention_cudnn_version_refusal(91900), "");
  EXPECT_EQ(flash_attention_cudnn_version_refusal(90000), "");
  EXPECT_NE(flash_attention_cudnn_version_refusal(8905).find("cuDNN version 8905"), std::string::npos);
}

void expect_view(const std::optional<FlashAttnTensor>& t, std::vector<int64_t> dims, std::vector<int64_t> strides) {
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(std::vector<int64_t>(t->dim, t->dim + 4), dims);
  EXPECT_EQ(std::vector<int64_t>(t->stride, t->stride + 4), strides);
}

TEST(FlashAttentionView, Gpt2HeadsReadInPlaceFromTheQkvProjection) {
  // qkv (B, T, 3C) -> narrow C columns -> (B, T, H, D) -> transpose(1, 2): (B, H, T, D), strides (T*3C, D, 3C, 1).
  const int64_t B = 4, T = 32, H = 3, D = 16, C = H * D;
  Tensor qkv = zeros({B, T, 3 * C}, DType::bf16);
  Tensor k = qkv.narrow(2, C, C).reshape({B, T, H, D}).transpose(1, 2);
  expect_view(flash_attention_view(k.shape(), k.strides(), 2, 0), {B, H, T, D}, {T * 3 * C, D, 3 * C, 1});
  expect_view(flash_attention_view(k.shape(), k.strides(), 2, 4096 + 16), {B, H, T, D}, {T * 3 * C, D, 3 * C, 1});
}

TEST(FlashAttentionView, BatchDimsBecomeBAndH) {
  // Contiguous (B, H, T, D).
  expect_view(flash_attention_view({2, 3, 5, 8}, {120, 40, 8, 1}, 2, 0), {2, 3, 5, 8}, {120, 40, 8, 1});
  // (N, L, E): h = N, b = 1.
  expect_view(flash_attention_view({6, 5, 8}, {40, 8, 1}, 2, 0), {1, 6, 5, 8}, {240, 40, 8, 1});
  // (L, E): one head of one batch.
  expect_view(flash_attention_view({5, 8}, {8, 1}, 2, 0), {1, 1, 5, 8}, {40, 40, 8, 1});
  // (A, B, H, T, D) contiguous: b = A * B with B's stride.
  expect_view(flash_attention_view({2, 3, 4, 5, 8}, {480, 160, 40, 8, 1}, 2, 0), {6, 4, 5, 8}, {160, 40, 8, 1});
  // Size-1 dims drop out.
  expect_view(flash_attention_view({2, 1, 5, 8}, {40, 40, 8, 1}, 2, 0), {2, 1, 5, 8}, {40, 40, 8, 1});
  expect_view(flash_attention_view({1, 2, 1, 3, 5, 8}, {999, 120, 999, 40, 8, 1}, 2, 0), {2, 3, 5, 8},
              {120, 40, 8, 1});
}

TEST(FlashAttentionView, RefusesWhatNeedsACopy) {
  // The outer batch dims do not step as one (a permutation of them).
  EXPECT_FALSE(flash_attention_view({2, 3, 4, 5, 8}, {160, 320, 40, 8, 1}, 2, 0).has_value());
  // d is not the unit-stride dim (k^T passed as k).
  EXPECT_FALSE(flash_attention_view({2, 3, 5, 8}, {120, 40, 1, 5}, 2, 0).has_value());
  // Strides that are not multiples of 16 bytes: bf16 rows of 12.
  EXPECT_FALSE(flash_attention_view({2, 3, 5, 12}, {180, 60, 12, 1}, 2, 0).has_value());
  EXPECT_TRUE(flash_attention_view({2, 3, 5, 12}, {180, 60, 12, 1}, 4, 0).has_value());  // 48 bytes
  // A first element off 16-byte alignment, negative strides, too few dims.
  EXPECT_FALSE(flash_attention_view({2, 3, 5, 8}, {120, 40, 8, 1}, 2, 8).has_value());
  EXPECT_FALSE(flash_attention_view({2, 3, 5, 8}, {120, -40, 8, 1}, 2, 0).has_value());
  EXPECT_FALSE(flash_attention_view({8}, {1}, 2, 0).has_value());
}

Tensor randn_like_shape(const Shape& shape, uint64_t seed, DType dt, Device dev) {
  Generator g(seed);
  return rand(shape, DType::f32, kCPU, &g, -1.0, 1.0).to(dt).to(dev);
}

TEST(SdpaPath, CpuCallsRunVoltsKernel) {
  EXPECT_FALSE(kernel_supported("flash_attn_fwd", kCPU, DType::bf16));
  EXPECT_FALSE(kernel_supported("flash_attn_bwd", kCPU, DType::f16));
#if !VOLT_WITH_CUDA
  EXPECT_FALSE(cudnn_sdpa_built());
#endif
  reset_sdpa_stats();
  EXPECT_EQ(sdpa_path_summary(sdpa_stats()), "none");
  Tensor q = randn_like_shape({2, 3, 4, 8}, 1, DType::bf16, kCPU);
  Tensor k = randn_like_shape({2, 3, 6, 8}, 2, DType::bf16, kCPU);
  Tensor v = randn_like_shape({2, 3, 6, 8}, 3, DType::bf16, kCPU);
  scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  scaled_dot_product_attention_with_weights(q, k, v);
  const SdpaStats s = sdpa_stats();
  EXPECT_EQ(s.cudnn, 0);
  EXPECT_EQ(s.fused, 2);
  EXPECT_EQ(s.last_fallback_reason, "");  // the CPU has no other path to fall back from
  EXPECT_EQ(sdpa_path_summary(s), "fused");
  EXPECT_EQ(sdpa_path_summary(SdpaStats{1, 0, ""}), "cudnn");
  EXPECT_EQ(sdpa_path_summary(SdpaStats{1, 1, ""}), "mixed");
  reset_sdpa_stats();
  EXPECT_EQ(sdpa_stats().fused, 0);
}

// ---- on a GPU -------------------------------------------------------------------------------------------------

struct AttnRun {
  Tensor out, dq, dk, dv;
};

// Forward and backward of one attention call from leaves q, k, v (made from the same seeds every time), with dout.
AttnRun run_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& dout, bool causal) {
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  AttnRun r;
  r.out = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, causal);
  r.out.backward(dout);
  r.out = r.out.detach();
  r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
  return r;
}

TEST(CudnnSdpaCuda, ForwardAndBackwardMatchVoltsKernel) {
  SKIP_WITHOUT_CUDNN_SDPA();
  const Device gpu = cuda_device(0);
  struct Case {
    Shape q, kv;
    bool causal;
  };
  // (B, H, T, D) GPT-2-like, causal and not; (N, L, E) with L != S; D = 128.
  const std::vector<Case> cases = {{{2, 3, 64, 64}, {2, 3, 64, 64}, true},
                                   {{2, 3, 64, 64}, {2, 3, 64, 64}, false},
                                   {{4, 24, 32}, {4, 40, 32}, true},
                                   {{1, 2, 48, 128}, {1, 2, 48, 128}, false}};
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " q " + shape_to_string(c.q) + (c.causal ? " causal" : ""));
      Tensor q = randn_like_shape(c.q, 1, dt, gpu), k = randn_like_shape(c.kv, 2, dt, gpu);
      Shape vs = c.kv;
      Tensor v = randn_like_shape(vs, 3, dt, gpu);
      Shape os = c.q;
      Tensor dout = randn_like_shape(os, 4, dt, gpu);
      reset_sdpa_stats();
      AttnRun flash = run_attention(q, k, v, dout, c.causal);
      const SdpaStats s = sdpa_stats();
      ASSERT_EQ(s.cudnn, 1) << "cuDNN did not run: " << s.last_fallback_reason;
      AttnRun fused;
      {
        DisableCudnnSdpa off;
        fused = run_attention(q, k, v, dout, c.causal);
      }
      EXPECT_EQ(sdpa_stats().fused, 1);
      EXPECT_EQ(sdpa_stats().last_fallback_reason, "VOLT_DISABLE_CUDNN_SDPA is set");
      const double tol = dt == DType::bf16 ? 2e-2 : 4e-3;
      EXPECT_EQ(flash.out.dtype(), dt);
      EXPECT_EQ(flash.out.shape(), fused.out.shape());
      expect_close_rel(flash.out, fused.out, tol, "out");
      expect_close_rel(flash.dq, fused.dq, tol, "dq");
      expect_close_rel(flash.dk, fused.dk, tol, "dk");
      expect_close_rel(flash.dv, fused.dv, tol, "dv");
    }
  }
}

// GPT-2's layout: q, k, v are strided views of one (B, T, 3C) projection, read by cuDNN in place, and their
// gradients flow back into it.
TEST(CudnnSdpaCuda, ReadsStridedHeadsOfTheQkvProjection) {
  SKIP_WITHOUT_CUDNN_SDPA();
  const Device gpu = cuda_device(0);
  const int64_t B = 2, T = 64, H = 4, D = 64, C = H * D;
  Tensor qkv0 = randn_like_shape({B, T, 3 * C}, 5, DType::bf16, gpu);
  Tensor dout = randn_like_shape({B, H, T, D}, 6, DType::bf16, gpu);
  auto run = [&](Tensor& grad) {
    Tensor qkv = qkv0.detach().requires_grad_();
    auto head = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2); };
    Tensor y = scaled_dot_product_attention(head(0), head(1), head(2), Tensor(), 0.0, true);
    y.backward(dout);
    grad = qkv.grad();
    return y.detach();
  };
  reset_sdpa_stats();
  Tensor g_flash, g_fused;
  Tensor y_flash = run(g_flash);
  ASSERT_EQ(sdpa_stats().cudnn, 1) << sdpa_stats().last_fallback_reason;
  Tensor y_fused;
  {
    DisableCudnnSdpa off;
    y_fused = run(g_fused);
  }
  expect_close_rel(y_flash, y_fused, 2e-2, "out");
  expect_close_rel(g_flash, g_fused, 2e-2, "d qkv");
}

TEST(CudnnSdpaCuda, FallsBackAndSaysWhy) {
  SKIP_WITHOUT_CUDNN_SDPA();
  const Device gpu = cuda_device(0);
  Tensor q = randn_like_shape({2, 16, 64}, 1, DType::f32, gpu);
  reset_sdpa_stats();
  scaled_dot_product_attention(q, q, q, Tensor(), 0.0, true);  // f32: Volt's kernel
  EXPECT_EQ(sdpa_stats().cudnn, 0);
  EXPECT_NE(sdpa_stats().last_fallback_reason.find("float32"), std::string::npos) << sdpa_stats().last_fallback_reason;
  Tensor h = q.to(DType::bf16);
  Tensor keep = ones({16, 16}, DType::boolean, gpu);
  scaled_dot_product_attention(h, h, h, keep);  // a mask: Volt's kernel
  EXPECT_NE(sdpa_stats().last_fallback_reason.find("attn_mask"), std::string::npos);
  EXPECT_EQ(sdpa_stats().cudnn, 0);
  scaled_dot_product_attention(h, h, h);  // then cuDNN
  EXPECT_EQ(sdpa_stats().cudnn, 1) << sdpa_stats().last_fallback_reason;
  EXPECT_EQ(sdpa_path_summary(sdpa_stats()), "mixed");
}

// A second derivative through a cuDNN call is taken through Volt's kernel (composite backward).
TEST(CudnnSdpaCuda, SecondDerivativeGoesThroughVoltsKernel) {
  SKIP_WITHOUT_CUDNN_SDPA();
  const Device gpu = cuda_device(0);
  auto second = [&](bool cudnn) {
    std::optional<DisableCudnnSdpa> off;
    if (!cudnn) off.emplace();
    Tensor q = randn_like_shape({1, 2, 16, 32}, 7, DType::bf16, gpu).requires_grad_();
    Tensor k = randn_like_shape({1, 2, 16, 32}, 8, DType::bf16, gpu);
    Tensor v = randn_like_shape({1, 2, 16, 32}, 9, DType::bf16, gpu);
    Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    Tensor gq = autograd::grad(sum(mul(y, y)), q, Tensor(), {.create_graph = true});
    return autograd::grad(sum(mul(gq, gq)), q);
  };
  reset_sdpa_stats();
  Tensor with_cudnn = second(true);
  EXPECT_EQ(sdpa_stats().cudnn, 1) << sdpa_stats().last_fallback_reason;
  Tensor fused = second(false);
  expect_close_rel(with_cudnn, fused, 5e-2, "second derivative");
}

}  // namespace
}  // namespace volt
