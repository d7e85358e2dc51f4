// The CUDA column reductions (kernels/cuda/col_reduce.cuh): layer_norm's and group_norm's weight and bias gradients
// and sum over dim 0 (the bias gradient of linear), at shapes tall enough to be split over row ranges (thousands of
// rows) and short enough for one launch, against the CPU in f64. Each case skips, saying so, where no GPU is present.
#include <gtest/gtest.h>

#include <functional>

#include "common/gradcheck.h"
#include <volt/kernels/fused_ops.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::rand_f64;

namespace {

// Weight and bias gradients of sum(norm(x) * g) on `device` in `dtype`.
std::vector<Tensor> norm_param_grads(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& norm,
                                     const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, Device device,
                                     DType dtype) {
  Tensor xd = x.to(dtype).to(device), gd = g.to(dtype).to(device);
  Tensor wd = w.detach().to(device).set_requires_grad(), bd = b.detach().to(device).set_requires_grad();
  sum(mul(norm(xd, wd, bd).to(DType::f64), gd.to(DType::f64))).backward();
  return {wd.grad().cpu(), bd.grad().cpu()};
}

void expect_norm_grads_match(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& norm,
                             const Shape& x_shape, int64_t params, DType dtype, double tol) {
  Tensor x = rand_f64(x_shape, 11), g = rand_f64(x_shape, 12);
  Tensor w = rand_f64({params}, 13, 0.5, 1.5), b = rand_f64({params}, 14);
  const auto want = norm_param_grads(norm, x, w, b, g, kCPU, DType::f64);
  const auto got = norm_param_grads(norm, x, w.to(DType::f32), b.to(DType::f32), g, cuda_device(0), dtype);
  // Sums of thousands of terms of size ~1: an absolute bound scaled by the row count.
  const double atol = tol * static_cast<double>(x.numel() / params);
  expect_close(got[0], want[0].to_vector<double>(), atol, tol);
  expect_close(got[1], want[1].to_vector<double>(), atol, tol);
}

}  // namespace

TEST(ColReduceCuda, LayerNormWeightAndBiasGradientsOverManyRowsMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  auto ln = [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, {x.size(-1)}, w, b); };
  expect_norm_grads_match(ln, {4096, 768}, 768, DType::f32, 1e-5);   // GPT-2's width: split into ~20 row ranges
  expect_norm_grads_match(ln, {8, 1000, 96}, 96, DType::f32, 1e-5);  // 8000 rows of 96: 3 column tiles
  expect_norm_grads_match(ln, {3000, 37}, 37, DType::f32, 1e-5);     // a partial column tile
  expect_norm_grads_match(ln, {64, 768}, 768, DType::f32, 1e-5);     // too few rows to split: one launch, no partials
}

TEST(ColReduceCuda, GroupNormOfTwoDimInputOverManyRowsMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  // (N, C) input: inner == 1, 4 groups of 16 channels, the rows of a group interleaved with the other groups'.
  auto gn = [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 4, w, b); };
  expect_norm_grads_match(gn, {6000, 64}, 64, DType::f32, 1e-5);
}

TEST(ColReduceCuda, ResidualLayerNormWeightGradientsMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  Tensor r = rand_f64({2048, 768}, 15);
  auto fused = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    return residual_layer_norm(x, r.to(x.dtype()).to(x.device()), w, b).second;
  };
  expect_norm_grads_match(fused, {2048, 768}, 768, DType::f32, 1e-5);
}

TEST(ColReduceCuda, SumOverRowsOfTallMatricesMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  for (const Shape& s : {Shape{20000, 300}, Shape{16384, 2304}, Shape{5000, 7}, Shape{100, 50}}) {
    Tensor x = rand_f64(s, 16);
    const std::vector<double> want = sum(x, {0}).to_vector<double>();
    const double n = static_cast<double>(s[0]);
    expect_close(sum(x.to(DType::f32).to(cuda_device(0)), {0}).cpu(), want, 1e-6 * n, 1e-5);
    expect_close(sum(x.to(cuda_device(0)), {0}).cpu(), want, 1e-12 * n, 1e-12);
    // bf16 input, f32 accumulation: the inputs' rounding (2^-9 relative each) bounds the difference.
    Tensor xb = x.to(DType::bf16);
    expect_close(sum(xb.to(cuda_device(0)), {0}).cpu(), sum(xb.to(DType::f64), {0}).to_vector<double>(),
                 0.01 * std::sqrt(n), 0.01);
    // Integers are summed exactly.
    Tensor xi = mul(x, 100.0).to(DType::i32);
    EXPECT_EQ(sum(xi.to(cuda_device(0)), {0}).cpu().to_vector<int64_t>(), sum(xi, {0}).to_vector<int64_t>());
  }
}
