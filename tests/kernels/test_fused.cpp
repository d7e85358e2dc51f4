// The fused ops (kernels/ops/fused_ops.cpp, docs/fused_ops.md) against their unfused compositions: residual_layer_norm
// against add() then layer_norm(), fused_cross_entropy against cross_entropy() and log_softmax() + nll_loss(), values
// and gradients; the gradient written over the logits; chunking; autocast; and the errors for bad arguments.
// Finite differences and the device x dtype sweep are the op table's (tests/kernels/op_table/op_table_rows_fused.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "common/fused_test_util.h"
#include "common/gradcheck.h"
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/fused_ops.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_all_near;
using volt::testing::leaf;
using volt::testing::rand_f64;
using volt::testing::targets;

namespace {

void expect_equal(const Tensor& a, const Tensor& b, const std::string& what) { expect_all_near(a, b, 0, 0, what); }

// a and b (both of half dtype dt) are equal or neighbours: at most one unit in the last place apart, the spacing of
// dt at the larger magnitude (subnormal spacing near zero). Two computations whose f32 results differ in the last
// bits round to neighbouring half values, whatever the magnitude, so a relative bound cannot express this (it
// fails at a power of two, where the spacing below is half that above, and in the subnormal range).
void expect_within_one_ulp(const Tensor& a, const Tensor& b, DType dt, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const int mant = dt == DType::bf16 ? 7 : 10, min_exp = dt == DType::bf16 ? -126 : -14;
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    int e = 0;
    std::frexp(std::max(std::abs(va[i]), std::abs(vb[i])), &e);  // magnitude in [2^(e-1), 2^e)
    const double ulp = std::ldexp(1.0, std::max(e - 1, min_exp) - mant);
    ASSERT_LE(std::abs(va[i] - vb[i]), ulp) << what << ", element " << i << ": " << va[i] << " vs " << vb[i];
  }
}

struct NormCase {
  DType dtype;
  double grad_atol;  // the fused backward rounds once where the unfused one rounds dx, then adds ds and rounds again
};

// The fused op is the same arithmetic as add() then layer_norm(): bit-equal outputs, and gradients for x, r, weight
// and bias that agree within one rounding of the dtype, with s used both through y and as the residual stream.
TEST(ResidualLayerNorm, EqualsAddThenLayerNorm) {
  for (NormCase nc : {NormCase{DType::f64, 1e-12}, NormCase{DType::f32, 1e-5}, NormCase{DType::f16, 2e-2},
                      NormCase{DType::bf16, 8e-2}}) {
    SCOPED_TRACE(dtype_name(nc.dtype));
    const DType pdt = nc.dtype == DType::f64 ? DType::f64 : DType::f32;
    Tensor x0 = rand_f64({5, 3, 24}, 1, -2, 2).to(nc.dtype), r0 = rand_f64({5, 3, 24}, 2).to(nc.dtype);
    Tensor w0 = rand_f64({24}, 3, 0.5, 1.5).to(pdt), b0 = rand_f64({24}, 4).to(pdt);
    Tensor up_y = rand_f64({5, 3, 24}, 5).to(nc.dtype), up_s = rand_f64({5, 3, 24}, 6).to(nc.dtype);

    Tensor x = leaf(x0), r = leaf(r0), w = leaf(w0), b = leaf(b0);
    auto [s, y] = residual_layer_norm(x, r, w, b, 1e-5);
    add(sum(mul(y, up_y)), sum(mul(s, up_s))).backward();

    Tensor xu = leaf(x0), ru = leaf(r0), wu = leaf(w0), bu = leaf(b0);
    Tensor su = add(xu, ru);
    Tensor yu = layer_norm(su, {24}, wu, bu, 1e-5);
    add(sum(mul(yu, up_y)), sum(mul(su, up_s))).backward();

    EXPECT_EQ(s.dtype(), nc.dtype);
    EXPECT_EQ(y.dtype(), nc.dtype);
    expect_equal(s, su, "s");
    expect_equal(y, yu, "y");
    expect_all_near(x.grad(), xu.grad(), nc.grad_atol, 1e-2 * (nc.dtype == DType::f64 ? 1e-9 : 1.0), "dx");
    expect_equal(x.grad(), r.grad(), "dx == dr");
    expect_all_near(w.grad(), wu.grad(), 1e-9, 1e-5, "dweight");
    expect_all_near(b.grad(), bu.grad(), 1e-9, 1e-5, "dbias");
  }
}

// When s has no later use, its gradient is the layer-norm backward alone (the engine passes zeros for it).
TEST(ResidualLayerNorm, OnlyYUsed) {
  Tensor x = leaf(rand_f64({4, 10}, 7, -2, 2)), r = leaf(rand_f64({4, 10}, 8));
  Tensor up = rand_f64({4, 10}, 9);
  sum(mul(residual_layer_norm(x, r).second, up)).backward();
  Tensor xu = leaf(x), ru = leaf(r);
  sum(mul(layer_norm(add(xu, ru), {10}), up)).backward();
  expect_all_near(x.grad(), xu.grad(), 1e-12, 1e-9, "dx");
  expect_all_near(r.grad(), ru.grad(), 1e-12, 1e-9, "dr");
}

// Under autocast a bf16 sublayer output joins an f32 residual stream: both are added and normalised in f32.
TEST(ResidualLayerNorm, AutocastAddsInF32) {
  Tensor x = rand_f64({3, 8}, 10).to(DType::bf16), r = rand_f64({3, 8}, 11).to(DType::f32);
  {
    AutocastGuard ac(true, DType::bf16);
    auto [s, y] = residual_layer_norm(x, r);
    EXPECT_EQ(s.dtype(), DType::f32);
    EXPECT_EQ(y.dtype(), DType::f32);
    expect_equal(s, add(x.to(DType::f32), r), "s");
  }
  VOLT_EXPECT_ERROR(residual_layer_norm(x, r), "residual_layer_norm", "residual has dtype float32", "bfloat16");
}

// ---- layer_norm_for_matmul / residual_layer_norm_for_matmul ----------------------------------------------------

// Outputs and gradients of a norm whose output y feeds a matmul, under autocast to `dt` on `device`: the fused op
// (for_matmul: y written in dt by the norm kernel) or the composition it replaces (the norm in f32, then the cast
// the matmul makes). y's gradient is the same fixed dt tensor either way; s (residual == true) gets a fixed f32 one.
struct NormForMatmulRun {
  Tensor y, s, dx, dr, dw, db;
};
NormForMatmulRun norm_for_matmul_run(bool fused, bool residual, DType dt, Device device, int64_t rows, int64_t c,
                                     DType x_dt, DType r_dt) {
  Tensor x = leaf(rand_f64({rows, c}, 40, -2, 3).to(x_dt).to(device));
  Tensor r = leaf(rand_f64({rows, c}, 41).to(r_dt).to(device));
  Tensor w = leaf(rand_f64({c}, 42, 0.5, 1.5).to(DType::f32).to(device));
  Tensor b = leaf(rand_f64({c}, 43).to(DType::f32).to(device));
  const Tensor gy = rand_f64({rows, c}, 44).to(dt).to(device), gs = rand_f64({rows, c}, 45).to(DType::f32).to(device);
  NormForMatmulRun out;
  {
    AutocastGuard ac(true, dt);
    if (residual) {
      auto [s, y] = fused ? residual_layer_norm_for_matmul(x, r, w, b) : residual_layer_norm(x, r, w, b);
      out.s = s;
      out.y = fused ? y : y.to(dt);
    } else {
      out.y = fused ? layer_norm_for_matmul(x, {c}, w, b) : layer_norm(x, {c}, w, b).to(dt);
    }
  }
  Tensor loss = sum(mul(out.y.to(DType::f64), gy.to(DType::f64)));
  if (residual) loss = add(loss, sum(mul(out.s.to(DType::f64), gs.to(DType::f64))));
  loss.backward();
  out.dx = x.grad();
  out.dr = residual ? r.grad() : Tensor();
  out.dw = w.grad();
  out.db = b.grad();
  return out;
}

void expect_norm_for_matmul_equals_the_cast(Device device, int64_t rows, int64_t c) {
  for (DType dt : {DType::bf16, DType::f16})
    for (bool residual : {false, true})
      for (DType x_dt : {DType::f32, DType::bf16})
        // The residual in x's dtype, or in the autocast dtype (a sublayer's output beside the f32 stream: the fused
        // op reads it without a cast and writes its gradient in that dtype).
        for (DType r_dt : {x_dt, dt}) {
          if (!residual && r_dt != x_dt) continue;
          SCOPED_TRACE(std::string(dtype_name(dt)) + (residual ? " residual " + std::string(dtype_name(r_dt)) : "") +
                       " x " + dtype_name(x_dt) + " " + std::to_string(rows) + " x " + std::to_string(c));
          const NormForMatmulRun f = norm_for_matmul_run(true, residual, dt, device, rows, c, x_dt, r_dt);
          const NormForMatmulRun u = norm_for_matmul_run(false, residual, dt, device, rows, c, x_dt, r_dt);
          EXPECT_EQ(f.y.dtype(), dt);
          EXPECT_EQ(u.y.dtype(), dt);
          // The same f32 arithmetic in both, up to how the compiler contracts multiply-adds in each instantiation:
          // f32 results within a few units in the last place, half results within one.
          expect_within_one_ulp(f.y.cpu(), u.y.cpu(), dt, "y");
          const double f32_tol = 4 * std::ldexp(1.0, -23);
          if (residual) {
            EXPECT_EQ(f.s.dtype(), DType::f32);
            expect_equal(f.s.cpu(), u.s.cpu(), "s");
            EXPECT_EQ(f.dr.dtype(), r_dt);
            if (r_dt == DType::f32)
              expect_all_near(f.dr.cpu(), u.dr.cpu(), f32_tol, f32_tol, "dr");
            else
              expect_within_one_ulp(f.dr.cpu(), u.dr.cpu(), r_dt, "dr");
          }
          EXPECT_EQ(f.dx.dtype(), x_dt);
          if (x_dt == DType::f32)
            expect_all_near(f.dx.cpu(), u.dx.cpu(), f32_tol, f32_tol, "dx");
          else
            expect_within_one_ulp(f.dx.cpu(), u.dx.cpu(), x_dt, "dx");
          expect_all_near(f.dw.cpu(), u.dw.cpu(), f32_tol * rows, f32_tol, "dw");
          expect_all_near(f.db.cpu(), u.db.cpu(), f32_tol * rows, f32_tol, "db");
        }
}

// The fused output in the autocast dtype equals layer_norm's f32 output cast to it, and every gradient equals the
// gradient through that cast: the kernels round the same f32 values once and read y's gradient widened exactly as
// the cast's backward widens it (equal up to the compiler's multiply-add contraction, a unit in the last place).
TEST(NormForMatmul, EqualsTheNormThenTheCast) {
  expect_norm_for_matmul_equals_the_cast(kCPU, 6, 24);
  expect_norm_for_matmul_equals_the_cast(kCPU, 3, 768);
}

TEST(NormForMatmul, OutsideAutocastAndForF64ItIsTheNormItself) {
  Tensor x = rand_f64({4, 8}, 46), r = rand_f64({4, 8}, 47), w = rand_f64({8}, 48), b = rand_f64({8}, 49);
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor xd = x.to(dt), rd = r.to(dt), wd = w.to(dt), bd = b.to(dt);
    const Tensor y = layer_norm_for_matmul(xd, {8}, wd, bd);
    EXPECT_EQ(y.dtype(), dt);
    expect_equal(y, layer_norm(xd, {8}, wd, bd), "y outside autocast");
    auto [s, y2] = residual_layer_norm_for_matmul(xd, rd, wd, bd);
    auto [s_ref, y2_ref] = residual_layer_norm(xd, rd, wd, bd);
    expect_equal(s, s_ref, "s outside autocast");
    expect_equal(y2, y2_ref, "y outside autocast");
  }
  AutocastGuard ac(true, DType::bf16);
  EXPECT_EQ(layer_norm_for_matmul(x, {8}, w, b).dtype(), DType::f64) << "f64 keeps f64 under autocast";
  EXPECT_EQ(residual_layer_norm_for_matmul(x, r, w, b).second.dtype(), DType::f64);
  VOLT_EXPECT_ERROR(layer_norm_for_matmul(x.to(DType::f32), {7}, w.to(DType::f32)), "layer_norm", "normalized_shape");
  VOLT_EXPECT_ERROR(residual_layer_norm_for_matmul(x.to(DType::f32), r), "residual_layer_norm", "float64", "float32");
}

TEST(NormForMatmulCuda, EqualsTheNormThenTheCast) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA norm kernels run on a GPU only";
  expect_norm_for_matmul_equals_the_cast(cuda_device(0), 300, 768);  // the warp-per-row kernels
  expect_norm_for_matmul_equals_the_cast(cuda_device(0), 40, 770);   // the block kernels
}

// The backward keeps s (and the statistics), not x and r: under autocast r is an f32 copy of a half sublayer
// output made by the op itself, which would otherwise stay alive until the backward (an activation per layer).
TEST(ResidualLayerNorm, TheGraphDoesNotKeepTheAutocastCopyOfTheResidual) {
  const int64_t rows = 64, c = 256, n = rows * c;
  Tensor x = leaf(rand_f64({rows, c}, 50).to(DType::f32)), r = leaf(rand_f64({rows, c}, 51).to(DType::bf16));
  for (bool for_matmul : {false, true}) {
    SCOPED_TRACE(for_matmul ? "residual_layer_norm_for_matmul" : "residual_layer_norm");
    const int64_t before = memory_stats(kCPU).allocated;
    Tensor s, y;
    {
      AutocastGuard ac(true, DType::bf16);
      std::tie(s, y) = for_matmul ? residual_layer_norm_for_matmul(x, r) : residual_layer_norm(x, r);
    }
    const int64_t held = memory_stats(kCPU).allocated - before;
    // s (f32) and y (f32, or bf16 for a matmul) and two floats of statistics per row; an f32 copy of r would add
    // 4 n bytes more.
    const int64_t expected = 4 * n + (for_matmul ? 2 : 4) * n + 8 * rows;
    EXPECT_GE(held, expected);
    EXPECT_LT(held, expected + 2 * n) << "the f32 copy of r is still held";
    add(sum(s), sum(y.to(DType::f32))).backward();
    ASSERT_TRUE(r.grad().defined());
    EXPECT_EQ(r.grad().dtype(), DType::bf16);
    x.set_grad(Tensor());
    r.set_grad(Tensor());
  }
}

// A half sublayer output added to the f32 stream by residual_layer_norm_for_matmul under autocast is read as it is:
// the forward allocates s, y and the statistics and nothing else (an f32 copy of r would be 4 n bytes at its peak),
// and r's gradient comes back in r's dtype, equal to the f32 gradient of s rounded to it. With
// VOLT_DISABLE_KERNELS=half_residual (CTest runs this case so as kernels_disabled_paths) the copy is made instead,
// and everything else holds.
TEST(NormForMatmul, AHalfResidualIsReadWithoutACopy) {
  const bool fallback = kernel_paths::disabled(kernel_paths::kHalfResidual);
  std::printf("half_residual path %s\n", fallback ? "disabled (VOLT_DISABLE_KERNELS): r is cast to f32" : "on");
  const int64_t rows = 64, c = 256, n = rows * c;
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = leaf(rand_f64({rows, c}, 52).to(DType::f32)), r = leaf(rand_f64({rows, c}, 53).to(dt));
    const int64_t before = memory_stats(kCPU).allocated;
    reset_peak_memory_stats(kCPU);
    Tensor s, y;
    {
      AutocastGuard ac(true, dt);
      std::tie(s, y) = residual_layer_norm_for_matmul(x, r);
    }
    EXPECT_EQ(y.dtype(), dt);
    const int64_t expected = 4 * n + 2 * n + 8 * rows;  // s, y, mean and rstd
    EXPECT_EQ(memory_stats(kCPU).allocated - before, expected);
    if (fallback)
      EXPECT_GE(memory_stats(kCPU).peak_allocated - before, expected + 4 * n) << "no f32 copy of r was made";
    else
      EXPECT_LT(memory_stats(kCPU).peak_allocated - before, expected + 2 * n) << "an f32 copy of r was made";
    expect_equal(s, add(x, r.to(DType::f32)), "s");
    const Tensor gs = rand_f64({rows, c}, 54).to(DType::f32), gy = rand_f64({rows, c}, 55).to(DType::f32);
    add(sum(mul(s, gs)), sum(mul(y.to(DType::f32), gy))).backward();
    ASSERT_TRUE(r.grad().defined());
    EXPECT_EQ(r.grad().dtype(), dt);
    EXPECT_EQ(x.grad().dtype(), DType::f32);
    expect_equal(r.grad(), x.grad().to(dt), "r's gradient is s's rounded to its dtype");
  }
}

// ---- fused_mlp ------------------------------------------------------------------------------------------------

struct MlpRun {
  Tensor out, dx, dw1, db1, dw2, db2;
};
// linear(linear(x, w1, b1, act), w2, b2) as fused_mlp or as the composition, backpropagating a fixed weighting.
MlpRun mlp_run(bool fused, Activation act, DType dt, bool biases, const Shape& x_shape) {
  const int64_t in = x_shape.back(), hidden = 12, outf = 5;
  Tensor x = leaf(rand_f64(x_shape, 60).to(dt)), w1 = leaf(rand_f64({hidden, in}, 61).to(dt));
  Tensor w2 = leaf(rand_f64({outf, hidden}, 62).to(dt));
  Tensor b1 = biases ? leaf(rand_f64({hidden}, 63).to(dt)) : Tensor(), b2 = biases ? leaf(rand_f64({outf}, 64).to(dt)) : Tensor();
  Tensor out = fused ? fused_mlp(x, w1, b1, w2, b2, act) : linear(linear(x, w1, b1, act), w2, b2);
  Shape os = x_shape;
  os.back() = outf;
  sum(mul(out.to(DType::f64), rand_f64(os, 65))).backward();
  return {out.detach(), x.grad(), w1.grad(), biases ? b1.grad() : Tensor(), w2.grad(), biases ? b2.grad() : Tensor()};
}

TEST(FusedMlp, EqualsTheTwoLinearLayers) {
  for (Activation act : {Activation::GELUTanh, Activation::GELU, Activation::ReLU, Activation::None})
    for (DType dt : {DType::f64, DType::f32})
      for (bool biases : {true, false})
        for (const Shape& xs : {Shape{7, 6}, Shape{2, 3, 6}}) {
          SCOPED_TRACE(std::string(activation_name(act)) + " " + dtype_name(dt) + (biases ? " bias " : " ") +
                       shape_to_string(xs));
          const MlpRun f = mlp_run(true, act, dt, biases, xs), u = mlp_run(false, act, dt, biases, xs);
          // The same kernels on the same values: the recomputed activation is the forward's (f32 and f64 keep
          // the pre-activation unrounded).
          expect_equal(f.out, u.out, "out");
          for (auto [a, b, what] : {std::tuple{f.dx, u.dx, "dx"}, std::tuple{f.dw1, u.dw1, "dw1"},
                                    std::tuple{f.dw2, u.dw2, "dw2"}})
            expect_equal(a, b, what);
          if (biases) {
            expect_equal(f.db1, u.db1, "db1");
            expect_equal(f.db2, u.db2, "db2");
          }
        }
}

TEST(FusedMlp, HalfTypesAndAutocastMatchTheComposition) {
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const MlpRun f = mlp_run(true, Activation::GELUTanh, dt, true, {9, 6});
    const MlpRun u = mlp_run(false, Activation::GELUTanh, dt, true, {9, 6});
    expect_equal(f.out, u.out, "out");
    expect_equal(f.dx, u.dx, "dx");
    // w2's gradient sums the activation recomputed from the rounded pre-activation: a few half ulps of a sum of 9.
    expect_all_near(f.dw2, u.dw2, 0.05, 0.02, "dw2");
  }
  Tensor x = rand_f64({4, 6}, 66).to(DType::f32), w1 = rand_f64({12, 6}, 67).to(DType::f32);
  Tensor w2 = leaf(rand_f64({5, 12}, 68).to(DType::f32));
  AutocastGuard ac(true, DType::bf16);
  Tensor out = fused_mlp(x, w1, Tensor(), w2, Tensor(), Activation::GELUTanh);
  EXPECT_EQ(out.dtype(), DType::bf16);
  expect_equal(out, linear(linear(x, w1, Tensor(), Activation::GELUTanh), w2, Tensor()), "autocast out");
  sum(out.to(DType::f32)).backward();
  EXPECT_EQ(w2.grad().dtype(), DType::f32) << "an f32 parameter gets an f32 gradient through the autocast copy";
}

// The activation between the layers is not held from the forward to the backward.
TEST(FusedMlp, KeepsThePreActivationNotTheActivation) {
  const int64_t rows = 64, in = 16, hidden = 256, outf = 16;
  Tensor x = leaf(rand_f64({rows, in}, 69).to(DType::f32)), w1 = leaf(rand_f64({hidden, in}, 70).to(DType::f32));
  Tensor w2 = leaf(rand_f64({outf, hidden}, 71).to(DType::f32));
  auto held = [&](bool fused) {
    const int64_t before = memory_stats(kCPU).allocated;
    Tensor out = fused ? fused_mlp(x, w1, Tensor(), w2, Tensor(), Activation::GELUTanh)
                       : linear(linear(x, w1, Tensor(), Activation::GELUTanh), w2);
    return memory_stats(kCPU).allocated - before;
  };
  const int64_t fused = held(true), composed = held(false), activation = 4 * rows * hidden;
  EXPECT_EQ(composed - fused, activation);
}

// On CUDA the GELU backward runs inside the product that computes the hidden layer's gradient (matmul_act_bwd: one
// cuBLASLt matmul with the DGELU_BGRAD epilogue, or DGELU without a bias) where the hidden width is a multiple of 8;
// other widths take the product and bias_act_bwd. Against the CPU in the same dtype: the output and every gradient
// within a few units in the last place of the tensor's largest value (the GPU applies the derivative to the f32
// product before rounding; the CPU rounds the product first).
TEST(FusedMlpCuda, GeluBackwardInTheProductMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the cuBLASLt epilogues run on a GPU only";
  struct Case {
    int64_t rows, in, hidden, out;
    bool biases;
  };
  for (const Case c : {Case{512, 64, 256, 64, true}, Case{512, 64, 256, 64, false}, Case{96, 16, 12, 8, true}})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " hidden " + std::to_string(c.hidden) + (c.biases ? "" : " no bias"));
      auto run = [&](Device dev) {
        Tensor x = leaf(rand_f64({c.rows, c.in}, 70).to(dt).to(dev));
        Tensor w1 = leaf(rand_f64({c.hidden, c.in}, 71, -0.3, 0.3).to(dt).to(dev));
        Tensor w2 = leaf(rand_f64({c.out, c.hidden}, 72, -0.3, 0.3).to(dt).to(dev));
        Tensor b1 = c.biases ? leaf(rand_f64({c.hidden}, 73).to(dt).to(dev)) : Tensor();
        Tensor b2 = c.biases ? leaf(rand_f64({c.out}, 74).to(dt).to(dev)) : Tensor();
        Tensor out = fused_mlp(x, w1, b1, w2, b2, Activation::GELUTanh);
        sum(mul(out.to(DType::f64), rand_f64({c.rows, c.out}, 75).to(dev))).backward();
        std::vector<Tensor> r{out.detach(), x.grad(), w1.grad(), w2.grad()};
        if (c.biases) r.insert(r.end(), {b1.grad(), b2.grad()});
        for (Tensor& t : r) t = t.cpu().to(DType::f64);
        return r;
      };
      const long long dgelu_before = kernel_paths::times_taken(kernel_paths::kLtDgelu);
      const std::vector<Tensor> want = run(kCPU), got = run(cuda_device(0));
      // The epilogue ran where it applies (not the fallback that computes the same), unless switched off.
      if (c.hidden % 8 == 0 && dt != DType::f32 && !kernel_paths::disabled(kernel_paths::kLtDgelu))
        EXPECT_GT(kernel_paths::times_taken(kernel_paths::kLtDgelu), dgelu_before) << "the DGELU epilogue did not run";
      // f32 as LinearActivationCuda bounds cuBLASLt's GELU epilogue (its tanh form may differ from the CPU's in
      // the last bits); the half types a few units in the last place.
      const double tol = dt == DType::f32 ? 1e-4 : dt == DType::f16 ? 4e-3 : 3e-2;
      for (size_t i = 0; i < want.size(); ++i) {
        const double scale = max(abs(want[i])).item();
        expect_all_near(got[i], want[i], tol * scale, tol, "tensor " + std::to_string(i));
      }
    }
}

// Empty batches and an empty output layer: the gradients are zeros (b1's sums no rows; with no outputs the hidden
// layer gets no gradient at all), as the two layers give.
TEST(FusedMlp, EmptyShapesGiveZeroGradients) {
  for (const auto& [rows, outf] : {std::pair<int64_t, int64_t>{0, 3}, {4, 0}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", outputs " + std::to_string(outf));
    Tensor x = leaf(rand_f64({rows, 5}, 80)), w1 = leaf(rand_f64({8, 5}, 81)), b1 = leaf(rand_f64({8}, 82));
    Tensor w2 = leaf(rand_f64({outf, 8}, 83)), b2 = leaf(rand_f64({outf}, 84));
    Tensor out = fused_mlp(x, w1, b1, w2, b2, Activation::GELUTanh);
    EXPECT_EQ(out.shape(), (Shape{rows, outf}));
    sum(out).backward();
    for (const Tensor* g : {&x, &w1, &b1, &w2, &b2}) {
      ASSERT_TRUE(g->grad().defined());
      EXPECT_EQ(g->grad().shape(), g->shape());
      if (g->grad().numel() > 0) EXPECT_EQ(max(abs(g->grad())).item(), 0.0);
    }
  }
}

TEST(FusedMlp, BadArgumentsNameTheProblem) {
  Tensor x = rand_f64({4, 6}, 72), w1 = rand_f64({12, 6}, 73), w2 = rand_f64({5, 12}, 74);
  VOLT_EXPECT_ERROR(fused_mlp(x, w1, Tensor(), rand_f64({5, 11}, 75), Tensor(), Activation::GELU), "fused_mlp",
                    "w2 has shape (5, 11)", "12 features");
  VOLT_EXPECT_ERROR(fused_mlp(x, w1, Tensor(), w2, rand_f64({4}, 76), Activation::GELU), "fused_mlp", "b2",
                    "expected b2 of shape (5,)");
  VOLT_EXPECT_ERROR(fused_mlp(x, w1, Tensor(), w2.to(DType::f32), Tensor(), Activation::GELU), "fused_mlp", "w2",
                    "float32");
  VOLT_EXPECT_ERROR(fused_mlp(rand_f64({4, 7}, 77), w1, Tensor(), w2, Tensor(), Activation::GELU), "linear",
                    "in_features");
}

TEST(ResidualLayerNorm, BadArgumentsNameTheProblem) {
  Tensor x = rand_f64({2, 6}, 12), r = rand_f64({2, 6}, 13);
  VOLT_EXPECT_ERROR(residual_layer_norm(x, rand_f64({2, 5}, 14)), "residual has shape (2, 5)",
                    "x has shape (2, 6)");
  VOLT_EXPECT_ERROR(residual_layer_norm(x, r.to(DType::f32)), "residual has dtype float32", "float64");
  VOLT_EXPECT_ERROR(residual_layer_norm(x.to(DType::i64), r.to(DType::i64)), "floating-point x", "int64");
  VOLT_EXPECT_ERROR(residual_layer_norm(x, r, rand_f64({5}, 15)), "weight has shape (5,)", "needs (6,)");
  VOLT_EXPECT_ERROR(residual_layer_norm(x, r, Tensor(), rand_f64({6}, 16).to(DType::f32)), "bias has dtype float32");
  VOLT_EXPECT_ERROR(residual_layer_norm(x, r, Tensor(), Tensor(), -1.0), "eps must be non-negative");
  VOLT_EXPECT_ERROR(residual_layer_norm(x, Tensor()), "must both be defined");
  if (cuda_device_count() > 0)
    VOLT_EXPECT_ERROR(residual_layer_norm(x, r.to(cuda_device(0))), "residual is on cuda:0", "x is on cpu");
}

FusedCrossEntropyOptions ce_opts(Reduction red, int64_t ignore, int64_t chunk = 0, bool in_place = false) {
  FusedCrossEntropyOptions o;
  o.reduction = red;
  o.ignore_index = ignore;
  o.chunk_rows = chunk;
  o.grad_in_logits = in_place;
  return o;
}

// Loss and gradient equal cross_entropy's and log_softmax + nll_loss's, for mean and sum, with ignored rows, in
// one chunk or several (the last one short).
TEST(FusedCrossEntropy, EqualsCrossEntropyAndLogSoftmaxNll) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
      for (int64_t chunk : {0, 5}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (red == Reduction::Mean ? " mean" : " sum") + " chunk " +
                     std::to_string(chunk));
        const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
        Tensor z0 = rand_f64({13, 37}, 20, -4, 4).to(dt);
        Tensor t = targets(13, 37, 3, true);
        Tensor z = leaf(z0), zc = leaf(z0), zn = leaf(z0);
        Tensor loss = fused_cross_entropy(z, t, ce_opts(red, -1, chunk));
        Tensor ref = cross_entropy(zc, t, red, -1);
        Tensor ref2 = nll_loss(log_softmax(zn, 1), t, red, -1);
        EXPECT_EQ(loss.dtype(), dt);
        expect_all_near(loss, ref, tol, tol, "loss vs cross_entropy");
        expect_all_near(loss, ref2, tol, tol, "loss vs log_softmax + nll_loss");
        mul(loss, 0.75).backward();
        mul(ref, 0.75).backward();
        mul(ref2, 0.75).backward();
        expect_all_near(z.grad(), zc.grad(), tol, tol, "grad vs cross_entropy");
        expect_all_near(z.grad(), zn.grad(), tol, tol, "grad vs log_softmax + nll_loss");
        EXPECT_EQ(z.grad().to_vector<double>()[1 * 37 + 5], 0.0) << "an ignored row has no gradient";
      }
    }
  }
}

// Half logits: the loss accumulates in f32 and matches cross_entropy on the same half values within its rounding.
TEST(FusedCrossEntropy, HalfLogits) {
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor z0 = rand_f64({9, 50}, 21, -3, 3).to(dt);
    Tensor t = targets(9, 50, 5, false);
    Tensor z = leaf(z0), zc = leaf(z0.to(DType::f64));
    Tensor loss = fused_cross_entropy(z, t);
    Tensor ref = cross_entropy(zc, t);
    EXPECT_EQ(loss.dtype(), dt);
    expect_all_near(loss, ref, 0, dt == DType::f16 ? 2e-3 : 1e-2, "loss");
    loss.backward();
    ref.backward();
    expect_all_near(z.grad(), zc.grad(), 2e-4, dt == DType::f16 ? 2e-3 : 1e-2, "grad");
    AutocastGuard ac(true, dt);
    EXPECT_EQ(fused_cross_entropy(z0, t).dtype(), DType::f32) << "a loss under autocast is f32";
  }
}

// grad_in_logits: the gradient lands in the logits' own storage, once; a second backward is refused.
TEST(FusedCrossEntropy, GradientWrittenOverTheLogits) {
  Tensor z0 = rand_f64({6, 11}, 22, -2, 2).to(DType::f32);
  Tensor t = targets(6, 11, 1, false);
  Tensor zc = leaf(z0);
  Tensor ref = cross_entropy(zc, t);
  mul(ref, 3.0).backward();

  Tensor z = leaf(z0);
  Tensor loss = fused_cross_entropy(z, t, ce_opts(Reduction::Mean, -100, 4, true));
  expect_all_near(loss, ref, 1e-6, 1e-6, "loss");
  expect_all_near(z.detach(), div(zc.grad(), 3.0), 1e-6, 1e-5, "after the forward the logits hold d loss / d logits");
  Tensor big = mul(loss, 3.0);
  big.backward({}, /*retain_graph=*/true);
  expect_all_near(z.detach(), zc.grad(), 1e-6, 1e-5, "the logits' storage holds the gradient, scaled in place");
  expect_all_near(z.grad(), zc.grad(), 1e-6, 1e-5, "grad");
  VOLT_EXPECT_ERROR(big.backward(), "second backward", "grad_in_logits");
}

// f16/bf16 logits with grad_in_logits, as GPT2::loss runs them (no f32 copy): the loss is computed in f32 (returned
// in f32 with f32_loss) and the gradient, written over the logits in their dtype, is the f32 path's gradient rounded
// once: bit for bit on the CPU when the upstream gradient is 1, within two roundings otherwise.
TEST(FusedCrossEntropy, HalfLogitsWithGradInLogits) {
  for (DType dt : {DType::f16, DType::bf16}) {
    for (int64_t chunk : {0, 4}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " chunk " + std::to_string(chunk));
      const double eps = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
      Tensor z0 = rand_f64({9, 50}, 31, -3, 3).to(dt);
      Tensor t = targets(9, 50, 2, true);
      FusedCrossEntropyOptions o = ce_opts(Reduction::Mean, -1, chunk, true);
      o.f32_loss = true;
      Tensor zr = leaf(z0.to(DType::f64));
      Tensor ref = cross_entropy(zr, t, Reduction::Mean, -1);
      ref.backward();

      Tensor z = leaf(z0);
      Tensor loss = fused_cross_entropy(z, t, o);
      EXPECT_EQ(loss.dtype(), DType::f32) << "f32_loss";
      expect_all_near(loss, ref, 0, 1e-5, "loss vs the f64 reference");
      EXPECT_EQ(z.detach().dtype(), dt) << "the gradient is written in the logits' dtype";
      loss.backward();
      EXPECT_EQ(z.grad().dtype(), dt);
      expect_all_near(z.grad(), zr.grad(), 1e-7, eps, "grad vs the f64 reference");

      Tensor zf = leaf(z0.to(DType::f32));
      fused_cross_entropy(zf, t, o).backward();
      expect_equal(z.grad(), zf.grad().to(dt), "grad vs the f32 path's gradient rounded to the dtype");

      Tensor z2 = leaf(z0);
      mul(fused_cross_entropy(z2, t, o), 0.75).backward();
      expect_all_near(z2.grad(), mul(zr.grad(), 0.75), 1e-7, 2 * eps, "grad with an upstream gradient of 0.75");

      // An upstream gradient that the half dtype cannot hold (1/3) scales in f32: the half gradient times f32(1/3),
      // rounded once more (not times 1/3 rounded to the half dtype first).
      Tensor z3 = leaf(z0);
      mul(fused_cross_entropy(z3, t, o), 1.0 / 3).backward();
      Tensor third = mul(zf.grad().to(dt).to(DType::f32), scalar_tensor(1.0 / 3, DType::f32)).to(dt);
      expect_equal(z3.grad(), third, "grad with an upstream gradient of 1/3");

      o.f32_loss = false;
      EXPECT_EQ(fused_cross_entropy(leaf(z0), t, o).dtype(), dt) << "without f32_loss or autocast: the logits' dtype";
    }
  }
}

TEST(FusedCrossEntropy, HalfLogitsBadTargetsNameTheProblem) {
  Tensor z = leaf(rand_f64({4, 6}, 32).to(DType::bf16));
  Tensor t = targets(4, 6, 0, false);
  const FusedCrossEntropyOptions o = ce_opts(Reduction::Mean, -100, 0, true);
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, t.to(DType::i32), o), "target must hold class indices of dtype int64",
                    "int32");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, targets(5, 6, 0, false), o), "target has shape (5,)", "need (4,)");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, from_vector<int64_t>({0, 6, 1, 2}, {4}), o),
                    "target value 6 at position 1", "6 classes");
}

// On a GPU: GPT-2's classifier shape (64 rows of the padded vocabulary 50304, bf16, gradient in place) against the
// CPU: the loss within f32 summation order, the gradient within one unit in the last place of the dtype (on an H200
// the CUDA and CPU gradients differed by exactly that in a few elements: their f32 values differ in the last bits
// and round to neighbouring bf16/f16 values, also at powers of two and among f16 subnormals); also an f16 row width
// that is not a multiple of 8 (the CUDA kernel's unvectorised path), chunked, and the loss alone without grad.
TEST(FusedCrossEntropyCuda, HalfClassifierMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA classifier kernel runs on a GPU only";
  struct Case {
    DType dt;
    int64_t v, chunk;
  };
  for (const Case& c : {Case{DType::bf16, 50304, 0}, Case{DType::f16, 50257, 16}, Case{DType::bf16, 1000, 0}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dt)) + " v=" + std::to_string(c.v));
    const int64_t n = 64;
    Tensor z0 = rand_f64({n, c.v}, 33, -8, 8).to(c.dt);
    Tensor t = targets(n, c.v, 5, true);
    FusedCrossEntropyOptions o = ce_opts(Reduction::Mean, -1, c.chunk, true);
    o.f32_loss = true;
    Tensor zc = leaf(z0), zg = leaf(z0.to(cuda_device(0)));
    Tensor lc = fused_cross_entropy(zc, t, o), lg = fused_cross_entropy(zg, t.to(cuda_device(0)), o);
    expect_all_near(lg.cpu(), lc, 0, 1e-5, "loss, CUDA vs CPU");
    lc.backward();
    lg.backward();
    ASSERT_EQ(zg.grad().dtype(), c.dt);
    expect_within_one_ulp(zg.grad().cpu(), zc.grad(), c.dt, "grad, CUDA vs CPU");
    expect_equal(zg.detach().cpu(), zg.grad().cpu(), "the gradient is in the logits' storage");
    NoGradGuard ng;
    expect_all_near(fused_cross_entropy(z0.to(cuda_device(0)), t.to(cuda_device(0)), o).cpu(), lc, 0, 1e-5,
                    "loss without grad");
  }
}

TEST(FusedCrossEntropy, NoGradComputesLossOnly) {
  Tensor z = rand_f64({4, 6}, 23).to(DType::f32);
  Tensor t = targets(4, 6, 2, false);
  const std::vector<double> before = z.to_vector<double>();
  Tensor loss = fused_cross_entropy(z, t, ce_opts(Reduction::Sum, -100, 0, true));
  expect_all_near(loss, cross_entropy(z, t, Reduction::Sum), 1e-6, 1e-6, "loss");
  EXPECT_EQ(z.to_vector<double>(), before) << "logits that need no gradient are not overwritten";
  EXPECT_FALSE(loss.requires_grad());
}

TEST(FusedCrossEntropy, BadArgumentsNameTheProblem) {
  Tensor z = rand_f64({4, 6}, 24);
  Tensor t = targets(4, 6, 0, false);
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, from_vector<int64_t>({0, 1, 9, 2}, {4})),
                    "target value 9 at position 2", "6 classes");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, t.to(DType::i32)), "dtype int64", "int32");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, targets(3, 6, 0, false)), "target has shape (3,)", "need (4,)");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z.reshape({2, 2, 6}), t), "must be (N, V)", "(2, 2, 6)");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z.to(DType::i64), t), "floating point", "int64");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, t, ce_opts(Reduction::None, -100)), "reduction None");
  VOLT_EXPECT_ERROR(fused_cross_entropy(z, t, ce_opts(Reduction::Mean, -100, -2)), "chunk_rows must be >= 0");
  if (cuda_device_count() > 0)
    VOLT_EXPECT_ERROR(fused_cross_entropy(z, t.to(cuda_device(0))), "target is on cuda:0", "logits are on cpu");
}

}  // namespace
