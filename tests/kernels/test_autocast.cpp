// Autocast (runtime/autocast.h): the per-op dtype policy under each mode, values equal to the explicit casts,
// gradients in the inputs' own dtypes, nesting, backward inside a region; and unscale_grads_, the
// GradScaler's fused unscale + inf/NaN check.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/gradcheck.h"
#include <volt/kernels/fused_ops.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_close;

namespace {

Tensor randf(const Shape& shape, uint64_t seed, DType dt = DType::f32) {
  Generator g(seed);
  return rand(shape, DType::f32, kCPU, &g, -1.0, 1.0).to(dt);
}

// One row of the policy table: builds its inputs in `in` (f32 or a half dtype) and runs the op.
struct PolicyRow {
  std::string name;
  DType in;                       // dtype of the floating inputs
  DType off;                      // output dtype without autocast
  enum Kind { Lower, Fp32, Follow } kind;
  std::function<Tensor(DType)> run;
};

std::vector<PolicyRow> policy_rows() {
  using K = PolicyRow::Kind;
  Tensor idx = from_vector<int64_t>({0, 2, 1, 3}, {4});
  std::vector<PolicyRow> rows = {
      {"matmul", DType::f32, DType::f32, K::Lower, [](DType d) { return matmul(randf({4, 5}, 1, d), randf({5, 3}, 2, d)); }},
      {"matmul_batched", DType::f32, DType::f32, K::Lower,
       [](DType d) { return matmul(randf({2, 4, 5}, 1, d), randf({2, 5, 3}, 2, d)); }},
      {"matmul_vec", DType::f32, DType::f32, K::Lower, [](DType d) { return matmul(randf({5}, 1, d), randf({5, 3}, 2, d)); }},
      {"linear", DType::f32, DType::f32, K::Lower,
       [](DType d) { return linear(randf({4, 5}, 1, d), randf({3, 5}, 2, d), randf({3}, 3, d)); }},
      {"linear_relu", DType::f32, DType::f32, K::Lower,
       [](DType d) { return linear(randf({4, 5}, 1, d), randf({3, 5}, 2, d), randf({3}, 3, d), Activation::ReLU); }},
      {"linear_gelu_nobias", DType::f32, DType::f32, K::Lower,
       [](DType d) { return linear(randf({4, 5}, 1, d), randf({3, 5}, 2, d), Tensor(), Activation::GELU); }},
      {"conv2d", DType::f32, DType::f32, K::Lower,
       [](DType d) { return conv2d(randf({2, 3, 6, 6}, 1, d), randf({4, 3, 3, 3}, 2, d), randf({4}, 3, d)); }},
      {"scaled_dot_product_attention", DType::f32, DType::f32, K::Lower,
       [](DType d) { return scaled_dot_product_attention(randf({2, 4, 8}, 1, d), randf({2, 5, 8}, 2, d),
                                                         randf({2, 5, 3}, 3, d), randf({4, 5}, 4), 0.0, true); }},
      {"softmax", DType::f16, DType::f16, K::Fp32, [](DType d) { return softmax(randf({4, 5}, 1, d), 1); }},
      {"log_softmax", DType::bf16, DType::bf16, K::Fp32, [](DType d) { return log_softmax(randf({4, 5}, 1, d), 1); }},
      {"cross_entropy", DType::f16, DType::f16, K::Fp32,
       [idx](DType d) { return cross_entropy(randf({4, 5}, 1, d), idx); }},
      {"nll_loss", DType::bf16, DType::bf16, K::Fp32,
       [idx](DType d) { return nll_loss(log_softmax(randf({4, 5}, 1, d), 1), idx); }},
      {"mse_loss", DType::f16, DType::f16, K::Fp32, [](DType d) { return mse_loss(randf({4, 5}, 1, d), randf({4, 5}, 2, d)); }},
      {"batch_norm", DType::f16, DType::f16, K::Fp32,
       [](DType d) { return batch_norm(randf({4, 3}, 1, d), ones({3}), zeros({3}), Tensor(), Tensor(), true); }},
      {"layer_norm", DType::bf16, DType::bf16, K::Fp32,
       [](DType d) { return layer_norm(randf({4, 5}, 1, d), {5}, ones({5}), zeros({5})); }},
      {"group_norm", DType::f16, DType::f16, K::Fp32,
       [](DType d) { return group_norm(randf({2, 4, 3}, 1, d), 2, ones({4}), zeros({4})); }},
      {"residual_layer_norm", DType::bf16, DType::bf16, K::Fp32,
       [](DType d) { return residual_layer_norm(randf({4, 5}, 1, d), randf({4, 5}, 2, d), ones({5})).second; }},
      {"fused_cross_entropy", DType::f16, DType::f16, K::Fp32,
       [idx](DType d) { return fused_cross_entropy(randf({4, 5}, 1, d), idx); }},
      {"sum", DType::f16, DType::f16, K::Fp32, [](DType d) { return sum(randf({4, 5}, 1, d)); }},
      {"mean", DType::bf16, DType::bf16, K::Fp32, [](DType d) { return mean(randf({4, 5}, 1, d), {1}); }},
      {"var", DType::f16, DType::f16, K::Fp32, [](DType d) { return var(randf({4, 5}, 1, d), {0}); }},
      {"exp", DType::bf16, DType::bf16, K::Fp32, [](DType d) { return exp(randf({4, 5}, 1, d)); }},
      {"log", DType::f16, DType::f16, K::Fp32, [](DType d) { return log(add(abs(randf({4, 5}, 1, d)), 1.0)); }},
      {"pow_scalar", DType::f16, DType::f16, K::Fp32, [](DType d) { return pow(randf({4, 5}, 1, d), 2.0); }},
      {"pow_tensor", DType::bf16, DType::bf16, K::Fp32,
       [](DType d) { return pow(add(abs(randf({4, 5}, 1, d)), 1.0), randf({4, 5}, 2, d)); }},
      {"reciprocal", DType::f16, DType::f16, K::Fp32, [](DType d) { return rdiv(add(abs(randf({4, 5}, 1, d)), 1.0), 1.0); }},
      // Everything else follows its (widest) input.
      {"relu", DType::f16, DType::f16, K::Follow, [](DType d) { return relu(randf({4, 5}, 1, d)); }},
      {"add_same", DType::bf16, DType::bf16, K::Follow, [](DType d) { return add(randf({4, 5}, 1, d), randf({4, 5}, 2, d)); }},
      {"add_widest", DType::f16, DType::f32, K::Follow, [](DType d) { return add(randf({4, 5}, 1, d), randf({4, 5}, 2)); }},
      {"mul_scalar", DType::f16, DType::f16, K::Follow, [](DType d) { return mul(randf({4, 5}, 1, d), 3.0); }},
      {"tanh", DType::bf16, DType::bf16, K::Follow, [](DType d) { return tanh(randf({4, 5}, 1, d)); }},
      {"silu", DType::f16, DType::f16, K::Follow, [](DType d) { return silu(randf({4, 5}, 1, d)); }},
      {"dropout", DType::f16, DType::f16, K::Follow, [](DType d) { return dropout(randf({4, 5}, 1, d), 0.5, true); }},
      {"max_pool2d", DType::f16, DType::f16, K::Follow, [](DType d) { return max_pool2d(randf({1, 2, 4, 4}, 1, d), {2, 2}); }},
      {"cat", DType::bf16, DType::bf16, K::Follow, [](DType d) { return cat({randf({2, 3}, 1, d), randf({2, 3}, 2, d)}); }},
      // f32 inputs of the fp32 ops stay f32; f64 is never lowered.
      {"softmax_f32", DType::f32, DType::f32, K::Follow, [](DType d) { return softmax(randf({4, 5}, 1, d), 1); }},
      {"matmul_f64", DType::f64, DType::f64, K::Follow, [](DType d) { return matmul(randf({4, 5}, 1, d), randf({5, 3}, 2, d)); }},
  };
  return rows;
}

}  // namespace

TEST(Autocast, PolicyTableOutputDtypes) {
  for (const PolicyRow& r : policy_rows()) {
    for (int mode = 0; mode < 3; ++mode) {
      const DType ac = mode == 1 ? DType::f16 : DType::bf16;
      DType expected = r.off;
      Tensor out;
      if (mode == 0) {
        out = r.run(r.in);
      } else {
        AutocastGuard g(true, ac);
        out = r.run(r.in);
        if (r.kind == PolicyRow::Lower) expected = ac;
        if (r.kind == PolicyRow::Fp32) expected = DType::f32;
      }
      EXPECT_EQ(out.dtype(), expected) << r.name << " under " << (mode == 0 ? "no autocast" : dtype_name(ac))
                                       << ": got " << dtype_name(out.dtype());
    }
  }
  EXPECT_FALSE(autocast_enabled());
}

TEST(Autocast, LowerPrecisionValuesEqualExplicitCasts) {
  Tensor a = randf({7, 9}, 11), b = randf({9, 5}, 12), bias = randf({5}, 13), w = randf({5, 9}, 14);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor mm, lin;
    {
      AutocastGuard g(true, dt);
      mm = matmul(a, b);
      lin = linear(a, w, bias);
    }
    // The same products on inputs rounded to dt by hand (outside autocast) give the same bits.
    Tensor mm_ref = matmul(a.to(dt), b.to(dt)), lin_ref = linear(a.to(dt), w.to(dt), bias.to(dt));
    EXPECT_EQ(mm.to(DType::f32).to_vector<float>(), mm_ref.to(DType::f32).to_vector<float>()) << dtype_name(dt);
    EXPECT_EQ(lin.to(DType::f32).to_vector<float>(), lin_ref.to(DType::f32).to_vector<float>()) << dtype_name(dt);
    // ... and they are within the dtype's rounding of the fp32 product.
    Tensor full = matmul(a, b);
    const double tol = dt == DType::f16 ? 1e-2 : 6e-2;
    expect_close(mm, full.to_vector<double>(), tol, tol);
  }
}

TEST(Autocast, Fp32OpsComputeFromTheHalfValuesInFp32) {
  Tensor x = randf({6, 10}, 21, DType::bf16);
  Tensor in_autocast;
  {
    AutocastGuard g(true, DType::bf16);
    in_autocast = log_softmax(x, 1);
  }
  Tensor ref = log_softmax(x.to(DType::f32), 1);
  EXPECT_EQ(in_autocast.to_vector<float>(), ref.to_vector<float>());
}

// A lowered op's output meeting an fp32 tensor (a residual add under autocast): add's backward returns the fp32
// gradient, and the engine casts it to the bf16 output's dtype before linear's backward (its GEMM assumes one
// dtype; it once read the fp32 gradient as bf16 and gave garbage or NaN). Same bits as explicit casts.
TEST(Autocast, MixedDtypeGradientsArriveInTheOutputsDtype) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor h = randf({64, 16}, 41).set_requires_grad(), w = randf({8, 16}, 42).set_requires_grad();
    Tensor res = randf({64, 8}, 43);
    Tensor out;
    {
      AutocastGuard g(true, dt);
      out = add(res, linear(h, w));
    }
    EXPECT_EQ(out.dtype(), DType::f32);
    sum(mul(out, out)).backward();
    Tensor h2 = h.detach().clone().set_requires_grad(), w2 = w.detach().clone().set_requires_grad();
    Tensor ref = add(res, cast(linear(cast(h2, dt), cast(w2, dt)), DType::f32));
    sum(mul(ref, ref)).backward();
    EXPECT_EQ(h.grad().to_vector<float>(), h2.grad().to_vector<float>()) << dtype_name(dt);
    EXPECT_EQ(w.grad().to_vector<float>(), w2.grad().to_vector<float>()) << dtype_name(dt);
  }
}

TEST(Autocast, GradientsComeBackInTheParametersDtype) {
  Tensor x = randf({8, 6}, 31), w = randf({4, 6}, 32), b = randf({4}, 33);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  const std::vector<int64_t> tgt = {0, 1, 2, 3, 0, 1, 2, 3};
  Tensor target = from_vector<int64_t>(tgt, {8});
  // fp32 reference gradients.
  cross_entropy(linear(x, w, b), target).backward();
  std::vector<double> gx = x.grad().to_vector<double>(), gw = w.grad().to_vector<double>(),
                      gb = b.grad().to_vector<double>();
  for (DType dt : {DType::f16, DType::bf16}) {
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    Tensor loss;
    {
      AutocastGuard g(true, dt);
      Tensor logits = linear(x, w, b);
      EXPECT_EQ(logits.dtype(), dt);
      loss = cross_entropy(logits, target);
      EXPECT_EQ(loss.dtype(), DType::f32);
    }
    loss.backward();
    for (Tensor* t : {&x, &w, &b}) EXPECT_EQ(t->grad().dtype(), DType::f32) << dtype_name(dt);
    const double tol = dt == DType::f16 ? 5e-3 : 3e-2;
    expect_close(x.grad(), gx, tol, tol);
    expect_close(w.grad(), gw, tol, tol);
    expect_close(b.grad(), gb, tol, tol);
  }
}

TEST(Autocast, NestedDisabledRegionAndRestore) {
  Tensor a = randf({3, 4}, 41), b = randf({4, 2}, 42);
  {
    AutocastGuard on(true, DType::f16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(matmul(a, b).dtype(), DType::f16);
    {
      AutocastGuard off(false);  // user code that wants full precision
      EXPECT_FALSE(autocast_enabled());
      EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
      EXPECT_EQ(sum(a.to(DType::f16)).dtype(), DType::f16);
      {
        AutocastGuard inner(true, DType::bf16);
        EXPECT_EQ(matmul(a, b).dtype(), DType::bf16);
      }
      EXPECT_FALSE(autocast_enabled());
    }
    EXPECT_EQ(autocast_state().dtype, DType::f16);
    EXPECT_EQ(matmul(a, b).dtype(), DType::f16);
  }
  EXPECT_FALSE(autocast_enabled());
  VOLT_EXPECT_ERROR(AutocastGuard(true, DType::f32), "autocast", "f16 or bf16");
}

TEST(Autocast, BackwardInsideARegionRunsInTheRecordedDtypes) {
  Tensor w = randf({3, 5}, 51), x = randf({4, 5}, 52);
  w.set_requires_grad(true);
  auto run = [&](bool backward_inside) {
    w.set_grad(Tensor());
    AutocastGuard g(true, DType::bf16);
    Tensor loss = sum(relu(linear(x, w)));
    if (backward_inside) {
      loss.backward();
      EXPECT_TRUE(autocast_enabled());  // restored after the engine ran
    }
    return loss;
  };
  run(true);
  Tensor inside = w.grad();
  Tensor loss = run(false);
  loss.backward();
  EXPECT_EQ(inside.dtype(), DType::f32);
  EXPECT_EQ(inside.to_vector<float>(), w.grad().to_vector<float>());
}

TEST(UnscaleGrads, ScalesInPlaceAndFlagsNonFinite) {
  Tensor g1 = from_vector<float>({2.f, -4.f, 8.f}), g2 = from_vector<float>({1.f, 3.f}, {2}).to(DType::f16);
  Tensor g3 = from_vector<float>({6.f, 10.f}).to(DType::bf16);
  Tensor flag = unscale_grads_({g1, Tensor(), g2, g3}, 0.5);
  EXPECT_EQ(flag.dtype(), DType::f32);
  EXPECT_EQ(flag.dim(), 0);
  EXPECT_EQ(flag.item(), 0.0);
  expect_close(g1, {1, -2, 4}, 0, 0);
  expect_close(g2, {0.5, 1.5}, 0, 0);
  expect_close(g3, {3, 5}, 0, 0);

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = from_vector<float>({1.f, 2.f}), b = from_vector<float>({3.f, inf, 5.f});
  EXPECT_EQ(unscale_grads_({a, b}, 0.25).item(), 1.0);
  expect_close(a, {0.25, 0.5}, 0, 0);  // every tensor is still unscaled (the step is skipped anyway)
  Tensor c = from_vector<float>({nan}).to(DType::f16);
  EXPECT_EQ(unscale_grads_({from_vector<float>({1.f}), c}, 1.0).item(), 1.0);
  Tensor d = from_vector<double>({-inf, 1.0});
  EXPECT_EQ(unscale_grads_({d}, 2.0).item(), 1.0);
  // A value that overflows only in the half type was already inf when stored: caught.
  Tensor e = from_vector<float>({70000.f}).to(DType::f16);
  EXPECT_EQ(unscale_grads_({e}, 1.0 / 65536).item(), 1.0);
  EXPECT_EQ(unscale_grads_({}, 1.0).item(), 0.0);
}

TEST(UnscaleGrads, StridedGradientsAndErrors) {
  Tensor base = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = base.transpose(0, 1);  // (3, 2), not contiguous, shares base's storage
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_EQ(unscale_grads_({t}, 10.0).item(), 0.0);
  expect_close(base, {10, 20, 30, 40, 50, 60}, 0, 1e-7);

  Tensor r = from_vector<float>({1.f});
  r.set_requires_grad(true);
  VOLT_EXPECT_ERROR(unscale_grads_({r}, 1.0), "unscale_grads_", "requires grad");
  VOLT_EXPECT_ERROR(unscale_grads_({from_vector<int64_t>({1})}, 1.0), "unscale_grads_", "floating point");
  VOLT_EXPECT_ERROR(unscale_grads_({from_vector<float>({1.f})}, std::nan("")), "inv_scale", "finite");
}

TEST(UnscaleGrads, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << cuda_status();
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor cpu = randf({1000}, 61, dt), gpu = cpu.to(cuda_device());
    Tensor fc = unscale_grads_({cpu}, 1.0 / 1024), fg = unscale_grads_({gpu}, 1.0 / 1024);
    EXPECT_EQ(fg.item(), 0.0);
    EXPECT_EQ(fc.item(), 0.0);
    EXPECT_EQ(cpu.to(DType::f32).to_vector<float>(), gpu.to(kCPU).to(DType::f32).to_vector<float>()) << dtype_name(dt);
    Tensor bad = from_vector<float>({1.f, inf, 2.f}).to(dt).to(cuda_device());
    EXPECT_EQ(unscale_grads_({gpu, bad}, 0.5).item(), 1.0);
  }
}
