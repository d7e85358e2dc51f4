// The fused linear layer, linear(x, w, b, act): equal to act(linear(x, w, b)) forward and backward (bit for bit
// on the CPU for ReLU), gradients against finite differences, half types, the kernels it declares, errors, and
// the CUDA path (cuBLASLt epilogues and the fallback kernel) against the CPU where a GPU is present.
#include <gtest/gtest.h>

#include <cmath>

#include <string>
#include <vector>

#include "common/gradcheck.h"
#include <volt/kernels/kernel_support.h>
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/fused_ops.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

namespace volt {
namespace {

using testing::expect_close;
using testing::expect_gradients_match;
using testing::rand_f64;

constexpr Activation kActs[] = {Activation::None, Activation::ReLU, Activation::GELU, Activation::GELUTanh};

Tensor randf(const Shape& shape, uint64_t seed, DType dt = DType::f32) {
  Generator g(seed);
  return rand(shape, DType::f32, kCPU, &g, -1.0, 1.0).to(dt);
}

// The unfused composition the fused op must equal.
Tensor unfused(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  Tensor y = linear(x, w, b);
  switch (act) {
    case Activation::None: return y;
    case Activation::ReLU: return relu(y);
    case Activation::GELU: return gelu(y);
    case Activation::GELUTanh: return gelu(y, GeluApproximate::Tanh);
  }
  return y;
}

struct Grads {
  Tensor out, dx, dw, db;
};

// Output and gradients of sum(f(x, w, b) * weighting), on fresh leaves.
template <class F>
Grads run(F f, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& weighting) {
  Tensor x = x0.detach().set_requires_grad(), w = w0.detach().set_requires_grad();
  Tensor b = b0.defined() ? b0.detach().set_requires_grad() : Tensor();
  Tensor out = f(x, w, b);
  sum(mul(out, weighting)).backward();
  return {out.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

std::string label(Activation act, bool bias, const Shape& xs) {
  return std::string(activation_name(act)) + (bias ? " bias " : " nobias ") + shape_to_string(xs);
}

TEST(LinearActivation, EqualsTheUnfusedOpsForwardAndBackward) {
  // 784 -> 128: k above OpenBLAS's blocking; 10 outputs: the narrow AVX2 kernel.
  struct Case { Shape x; int64_t out; };
  for (Case cs : {Case{{6, 5}, 4}, Case{{2, 3, 5}, 4}, Case{{16, 784}, 128}, Case{{9, 128}, 10}}) {
    const int64_t in = cs.x.back();
    Tensor x = randf(cs.x, 1), w = randf({cs.out, in}, 2), b = randf({cs.out}, 3);
    Shape ys = cs.x;
    ys.back() = cs.out;
    Tensor weighting = randf(ys, 4);
    for (Activation act : kActs) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(label(act, with_bias, cs.x));
        Tensor bb = with_bias ? b : Tensor();
        Grads fused = run([&](auto& xx, auto& ww, auto& bv) { return linear(xx, ww, bv, act); }, x, w, bb, weighting);
        Grads ref = run([&](auto& xx, auto& ww, auto& bv) { return unfused(xx, ww, bv, act); }, x, w, bb, weighting);
        ASSERT_EQ(fused.out.shape(), ys);
        if (act == Activation::None || act == Activation::ReLU) {
          // Same GEMM, same bias fold, same activation and reduction order: the same bits.
          EXPECT_EQ(fused.out.to_vector<float>(), ref.out.to_vector<float>());
          EXPECT_EQ(fused.dx.to_vector<float>(), ref.dx.to_vector<float>());
          EXPECT_EQ(fused.dw.to_vector<float>(), ref.dw.to_vector<float>());
          if (with_bias) EXPECT_EQ(fused.db.to_vector<float>(), ref.db.to_vector<float>());
        } else {
          expect_close(fused.out, ref.out.to_vector<double>(), 1e-6, 1e-6);
          expect_close(fused.dx, ref.dx.to_vector<double>(), 1e-5, 1e-5);
          expect_close(fused.dw, ref.dw.to_vector<double>(), 1e-5, 1e-5);
          if (with_bias) expect_close(fused.db, ref.db.to_vector<double>(), 1e-5, 1e-5);
        }
      }
    }
  }
}

TEST(LinearActivation, GradientsMatchFiniteDifferences) {
  for (Activation act : kActs) {
    SCOPED_TRACE(activation_name(act));
    Tensor x = rand_f64({4, 3}, 41).set_requires_grad(), w = rand_f64({5, 3}, 42).set_requires_grad();
    Tensor b = rand_f64({5}, 43).set_requires_grad();
    expect_gradients_match([act](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2], act); },
                           {x, w, b});
    expect_gradients_match([act](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor(), act); },
                           {x, w});
    // Non-contiguous x and weight, 3-D x.
    Tensor xt = rand_f64({3, 2, 2}, 44).set_requires_grad(), wt = rand_f64({3, 5}, 45).set_requires_grad();
    expect_gradients_match(
        [act](const std::vector<Tensor>& in) { return linear(in[0].permute({1, 2, 0}), in[1].t(), in[2], act); },
        {xt, wt, b});
  }
}

TEST(LinearActivation, OnlyInputsThatNeedGradientsGetThem) {
  Tensor x = randf({4, 3}, 51), w = randf({2, 3}, 52).set_requires_grad(), b = randf({2}, 53);
  Tensor y = linear(x, w, b, Activation::GELU);
  sum(y).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // Without gradients nothing is recorded.
  Tensor z = linear(x, w.detach(), b, Activation::ReLU);
  EXPECT_FALSE(z.requires_grad());
}

TEST(LinearActivation, HalfTypesOnCpuComputeInFloat) {
  Tensor x = randf({4, 6}, 61), w = randf({3, 6}, 62), b = randf({3}, 63);
  for (DType dt : {DType::f16, DType::bf16}) {
    for (Activation act : kActs) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + activation_name(act));
      Tensor y = linear(x.to(dt), w.to(dt), b.to(dt), act);
      EXPECT_EQ(y.dtype(), dt);
      Tensor ref = unfused(x.to(dt).to(DType::f32), w.to(dt).to(DType::f32), b.to(dt).to(DType::f32), act);
      expect_close(y, ref.to_vector<double>(), 1e-2, 1e-2);
      if (act == Activation::ReLU)  // relu commutes with rounding: exactly the unfused half op
        EXPECT_EQ(y.to(DType::f32).to_vector<float>(),
                  unfused(x.to(dt), w.to(dt), b.to(dt), act).to(DType::f32).to_vector<float>());
    }
  }
}

TEST(LinearActivation, EmptyInputsAndZeroFeatures) {
  Tensor w = randf({3, 4}, 71), b = randf({3}, 72);
  EXPECT_EQ(linear(zeros({0, 4}), w, b, Activation::ReLU).shape(), (Shape{0, 3}));
  // in_features = 0: the product is empty, the output is act(bias).
  Tensor y = linear(zeros({2, 0}), zeros({3, 0}), from_vector<float>({-1, 0.5f, 2}), Activation::ReLU);
  expect_close(y, {0, 0.5, 2, 0, 0.5, 2});
}

TEST(LinearActivation, KernelsAreDeclaredAndSupported) {
  EXPECT_TRUE(kernel_supported("linear_act_fwd", kCPU, DType::f32));
  EXPECT_TRUE(kernel_supported("linear_act_fwd", kCPU, DType::f64));
  EXPECT_FALSE(kernel_supported("linear_act_fwd", kCPU, DType::bf16));  // the op computes half types in f32
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16})
    EXPECT_TRUE(kernel_supported("bias_act_bwd", kCPU, d)) << dtype_name(d);
  EXPECT_FALSE(kernel_supported("bias_act_bwd", kCPU, DType::i64));
  // fused_mlp's hidden-layer gradient: the CPU's f32/f64 (its half types run the product and bias_act_bwd).
  EXPECT_TRUE(kernel_supported("matmul_act_bwd", kCPU, DType::f32));
  EXPECT_TRUE(kernel_supported("matmul_act_bwd", kCPU, DType::f64));
  EXPECT_FALSE(kernel_supported("matmul_act_bwd", kCPU, DType::bf16));
  // The weight and bias gradients of a layer without activation in one kernel: the CPU's f32/f64 (its half types
  // run the product and the sum; on a GPU the op takes it for half types only).
  EXPECT_TRUE(kernel_supported("gemm_bgrad", kCPU, DType::f32));
  EXPECT_TRUE(kernel_supported("gemm_bgrad", kCPU, DType::f64));
  EXPECT_FALSE(kernel_supported("gemm_bgrad", kCPU, DType::bf16));
}

// A layer without activation takes its weight and bias gradients from gemm_bgrad (the product and the column sums
// of the output gradient): equal to the product and the sum as separate ops, in f64 to the last bits.
TEST(LinearActivation, WeightAndBiasGradientsInOneKernelEqualTheTwoOps) {
  Tensor x = randf({37, 11}, 61).to(DType::f64), w = randf({5, 11}, 62).to(DType::f64);
  Tensor b = randf({5}, 63).to(DType::f64), gy = randf({37, 5}, 64).to(DType::f64);
  Tensor wl = w.clone().set_requires_grad(), bl = b.clone().set_requires_grad();
  linear(x, wl, bl).backward(gy);
  expect_close(wl.grad(), matmul(gy.t(), x).to_vector<double>(), 1e-13, 1e-13);
  expect_close(bl.grad(), sum(gy, {0}).to_vector<double>(), 1e-13, 1e-13);
  // fused_mlp's second layer likewise (its hidden activation recomputed from the pre-activation).
  Tensor w1 = randf({7, 11}, 65).to(DType::f64), b1 = randf({7}, 66).to(DType::f64);
  Tensor w2 = randf({5, 7}, 67).to(DType::f64).set_requires_grad(), b2 = b.clone().set_requires_grad();
  fused_mlp(x, w1, b1, w2, b2, Activation::GELUTanh).backward(gy);
  const Tensor h = linear(x, w1, b1, Activation::GELUTanh);
  expect_close(w2.grad(), matmul(gy.t(), h).to_vector<double>(), 1e-13, 1e-13);
  expect_close(b2.grad(), sum(gy, {0}).to_vector<double>(), 1e-13, 1e-13);
}

TEST(LinearActivation, BadArgumentsNameTheProblem) {
  Tensor x = zeros({2, 3}), w = zeros({4, 3});
  VOLT_EXPECT_ERROR(linear(x, w, Tensor(), static_cast<Activation>(7)), "linear", "unknown activation", "7",
                    "ReLU");
  VOLT_EXPECT_ERROR(linear(zeros({2, 5}), w, Tensor(), Activation::ReLU), "linear", "(2, 5)", "(4, 3)",
                    "in_features");
  VOLT_EXPECT_ERROR(linear(x, w, zeros({5}), Activation::GELU), "linear", "bias", "(5,)", "(4,)");
  VOLT_EXPECT_ERROR(linear(x, w, zeros({4}, DType::f64), Activation::GELU), "linear", "bias", "float64",
                    "float32");
  VOLT_EXPECT_ERROR(linear(x, zeros({3}), Tensor(), Activation::ReLU), "linear", "weight", "2-D");
  VOLT_EXPECT_ERROR(linear(zeros({2, 3}, DType::i64), zeros({4, 3}, DType::i64), Tensor(), Activation::ReLU),
                    "linear", "floating");
}

// The CUDA path against the CPU: every activation and half type, with and without bias, output widths that
// take cuBLASLt's GELU aux path (a multiple of 8) and the fallback kernel, a transposed input.
void expect_cuda_matches_cpu() {
  const Device gpu = cuda_device(0);
  for (int64_t out : {8, 10}) {
    Tensor x = randf({12, 16}, 81), w = randf({out, 16}, 82), b = randf({out}, 83), weighting = randf({12, out}, 84);
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      const double tol = dt == DType::f32 || dt == DType::f64 ? 1e-4 : 3e-2;
      for (Activation act : kActs) {
        for (bool with_bias : {true, false}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " out=" + std::to_string(out) + " " + label(act, with_bias, {12, 16}));
          Tensor bb = with_bias ? b.to(dt) : Tensor();
          auto f = [&](auto& xx, auto& ww, auto& bv) { return linear(xx, ww, bv, act); };
          Grads cpu = run(f, x.to(dt), w.to(dt), bb, weighting.to(dt));
          Grads dev = run(f, x.to(gpu, dt), w.to(gpu, dt), with_bias ? bb.to(gpu) : Tensor(), weighting.to(gpu, dt));
          EXPECT_EQ(dev.out.dtype(), dt);
          expect_close(dev.out.cpu(), cpu.out.to_vector<double>(), tol, tol);
          if (dt != DType::bf16) expect_close(dev.dx.cpu(), cpu.dx.to_vector<double>(), tol, tol);
          expect_close(dev.dw.cpu(), cpu.dw.to_vector<double>(), tol, tol);
          if (with_bias) expect_close(dev.db.cpu(), cpu.db.to_vector<double>(), tol, tol);
        }
      }
    }
    // A transposed (non-contiguous) input.
    Tensor xt = randf({16, 12}, 85);
    expect_close(linear(xt.to(gpu).t(), w.to(gpu), b.to(gpu), Activation::GELUTanh).cpu(),
                 linear(xt.t(), w, b, Activation::GELUTanh).to_vector<double>(), 1e-4, 1e-4);
  }
  // Batches tall enough that the backward's column reduction (kernels/cuda/col_reduce.cuh) may split its rows
  // into ranges and fold their partial bias sums, with a column count that is not a multiple of the block's 32
  // (40: whole 16-byte packs of f32 and bf16 values, so the packed loads); a batch of 256 as in the MLP benchmark;
  // and a GPT-2 MLP shape (3072 outputs, 2048 rows), split into many ranges. Without a bias the reduction only
  // writes the activation's gradient (no partial sums, no fold).
  for (int64_t rows : {300, 256}) {
    Tensor x = randf({rows, 24}, 91), w = randf({40, 24}, 92), b = randf({40}, 93), weighting = randf({rows, 40}, 94);
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      const double tol = dt == DType::bf16 ? 5e-2 : 1e-4;
      for (Activation act : {Activation::ReLU, Activation::GELU}) {
        for (bool with_bias : {true, false}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) + " " +
                       label(act, with_bias, {rows, 24}));
          auto f = [&](auto& xx, auto& ww, auto& bv) { return linear(xx, ww, bv, act); };
          Tensor bb = with_bias ? b.to(dt) : Tensor();
          Grads cpu = run(f, x.to(dt), w.to(dt), bb, weighting.to(dt));
          Grads dev = run(f, x.to(gpu, dt), w.to(gpu, dt), with_bias ? bb.to(gpu) : Tensor(), weighting.to(gpu, dt));
          expect_close(dev.out.cpu(), cpu.out.to_vector<double>(), tol, tol);
          if (dt != DType::bf16) expect_close(dev.dx.cpu(), cpu.dx.to_vector<double>(), tol, tol);
          expect_close(dev.dw.cpu(), cpu.dw.to_vector<double>(), tol, tol);
          if (with_bias)
            expect_close(dev.db.cpu(), cpu.db.to_vector<double>(), tol * rows, tol);  // a sum of `rows` terms
        }
      }
    }
    // A plain small GEMM (the weight gradient's shape: 40 x 24 from `rows` rows).
    Tensor p = randf({rows, 40}, 95);
    expect_close(matmul(p.to(gpu).t(), x.to(gpu)).cpu(), matmul(p.t(), x).to_vector<double>(), 1e-4, 1e-4);
  }
  {
    const int64_t rows = 2048, out = 3072;
    Tensor x = randf({rows, 32}, 96), w = randf({out, 32}, 97), b = randf({out}, 98), weighting = randf({rows, out}, 99);
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " GPT-2 MLP shape");
      const double tol = dt == DType::bf16 ? 5e-2 : 1e-4;
      auto f = [&](auto& xx, auto& ww, auto& bv) { return linear(xx, ww, bv, Activation::GELUTanh); };
      Grads cpu = run(f, x.to(dt), w.to(dt), b.to(dt), weighting.to(dt));
      Grads dev = run(f, x.to(gpu, dt), w.to(gpu, dt), b.to(gpu, dt), weighting.to(gpu, dt));
      expect_close(dev.dx.cpu(), cpu.dx.to_vector<double>(), tol, tol);
      expect_close(dev.db.cpu(), cpu.db.to_vector<double>(), tol * std::sqrt(double(rows)), tol);
    }
  }
  VOLT_EXPECT_ERROR(linear(randf({2, 3}, 1).to(gpu), randf({4, 3}, 2), Tensor(), Activation::ReLU), "linear", "cuda",
                    "cpu");
}

// bf16/f16 layers without activation take their weight and bias gradients from one cuBLASLt matmul with the
// BGRADB epilogue (or, where its heuristics decline, the product and a column reduction): GPT-2's attention
// shapes (768 -> 2304 and 768 -> 768) over 2048 rows, and edge shapes (one output, one row, a transposed input,
// 12 input features), against the CPU's f32 arithmetic on the same half values. At GPT-2's shapes the epilogue
// itself must have run (kernel_paths::times_taken), unless VOLT_DISABLE_KERNELS switches it off.
TEST(LinearActivationCuda, WeightAndBiasGradientsInOneProduct) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  const Device gpu = cuda_device(0);
  EXPECT_TRUE(kernel_supported("gemm_bgrad", gpu, DType::bf16));
  struct Case {
    int64_t rows, in, out;
    bool transposed_x, gpt2;
  };
  for (const Case c : {Case{2048, 768, 2304, false, true}, Case{2048, 768, 768, false, true},
                       Case{300, 64, 1, false, false}, Case{1, 64, 40, false, false}, Case{256, 64, 40, true, false},
                       Case{256, 12, 40, false, false}}) {
    for (DType dt : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " rows=" + std::to_string(c.rows) + " in=" + std::to_string(c.in) +
                   " out=" + std::to_string(c.out) + (c.transposed_x ? " x transposed" : ""));
      Tensor x = c.transposed_x ? randf({c.in, c.rows}, 71).to(dt).t() : randf({c.rows, c.in}, 71).to(dt);
      Tensor w = randf({c.out, c.in}, 72).to(dt), b = randf({c.out}, 73).to(dt);
      Tensor gy = randf({c.rows, c.out}, 74).to(dt);
      Tensor wc = w.to(gpu).set_requires_grad(), bc = b.to(gpu).set_requires_grad();
      const long long taken = kernel_paths::times_taken(kernel_paths::kLtBgrad);
      linear(x.to(gpu), wc, bc).backward(gy.to(gpu));
      if (c.gpt2 && !kernel_paths::disabled(kernel_paths::kLtBgrad))
        EXPECT_GT(kernel_paths::times_taken(kernel_paths::kLtBgrad), taken) << "the BGRADB epilogue did not run";
      // References from the same half values in f32, rounded once.
      const Tensor dw = matmul(gy.to(DType::f32).t(), x.to(DType::f32)).to(dt).to(DType::f64);
      const Tensor db = sum(gy.to(DType::f32), {0}).to(dt).to(DType::f64);
      const double tol = dt == DType::bf16 ? 1.6e-2 : 2e-3;  // a few units of the half type's last place
      const double atol = tol * std::sqrt(double(c.rows));
      expect_close(wc.grad().cpu(), dw.to_vector<double>(), atol, tol);
      expect_close(bc.grad().cpu(), db.to_vector<double>(), atol, tol);
    }
  }
}

// Small f32 layers take Volt's own GEMM by default (kernels/common/small_gemm.h); with it off the same shapes
// take cuBLASLt's epilogues and the fallback kernel.
TEST(LinearActivationCuda, MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_status();
  struct Restore {
    ~Restore() { set_cuda_small_gemm(true); }
  } restore;
  for (bool small : {true, false}) {
    SCOPED_TRACE(small ? "small-product kernel" : "cuBLAS / cuBLASLt");
    set_cuda_small_gemm(small);
    expect_cuda_matches_cpu();
  }
}

}  // namespace
}  // namespace volt
