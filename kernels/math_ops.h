#pragma once
/// @file
/// Elementwise math and two factories of the research op set (kernels/ops/math_ops.cpp; per-element math in
/// kernels/common/elementwise.h, shared by the CPU loops and the CUDA kernels): sin, cos, erf, log1p, expm1,
/// softplus, elu, mish, floor, round, linspace and randint. They follow PyTorch's definitions.
///
/// The unary ops keep a floating input's dtype and shape (f16/bf16 are computed in f32 and rounded once);
/// integer and bool inputs of the smooth functions are converted to f32 first, as PyTorch does. Every smooth op
/// is differentiable twice and more: its backward formula is written in differentiable ops
/// (autograd::attach_differentiable), so autograd::grad(..., create_graph=true) gives second derivatives.
/// floor and round are piecewise constant: their gradient is zero everywhere (as in PyTorch), so they compose.
///
/// Autocast (runtime/autocast.h): log1p, expm1 and softplus run in f32 for f16/bf16 inputs (PyTorch's fp32
/// list); sin, cos, erf, elu, mish, floor and round run in their input's dtype.
#include <cstdint>

#include <volt/kernels/ops.h>

namespace volt {

// ---- smooth unary functions ------------------------------------------------------------------------------
/// sin(x); d/dx = cos(x).
Tensor sin(const Tensor& a);
/// cos(x); d/dx = -sin(x).
Tensor cos(const Tensor& a);
/// The error function erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt; d/dx = 2/sqrt(pi) exp(-x^2).
Tensor erf(const Tensor& a);
/// log(1 + x), accurate for small x; d/dx = 1 / (1 + x).
Tensor log1p(const Tensor& a);
/// exp(x) - 1, accurate for small x; d/dx = exp(x).
Tensor expm1(const Tensor& a);

// ---- activations -----------------------------------------------------------------------------------------
/// softplus(x) = log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's linear branch,
/// which avoids overflow); d/dx = sigmoid(beta x), or 1 on the linear branch. beta must be nonzero and finite.
Tensor softplus(const Tensor& a, double beta = 1.0, double threshold = 20.0);
/// elu(x) = x for x > 0, alpha (exp(x) - 1) for x <= 0; d/dx = 1 for x > 0, alpha exp(x) for x <= 0 (so alpha
/// at 0, as PyTorch).
Tensor elu(const Tensor& a, double alpha = 1.0);
/// mish(x) = x tanh(softplus(x)); d/dx = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)).
Tensor mish(const Tensor& a);

// ---- rounding (gradient zero) ----------------------------------------------------------------------------
/// The largest integer <= x, in x's dtype. Integer inputs are returned as a copy; bool is refused.
Tensor floor(const Tensor& a);
/// x rounded to the nearest integer, halves to even (0.5 -> 0, 1.5 -> 2, -2.5 -> -2), as torch.round.
/// Integer inputs are returned as a copy; bool is refused.
Tensor round(const Tensor& a);

// ---- factories (not differentiable) ----------------------------------------------------------------------
/// `steps` values evenly spaced from start to end, both included (steps = 1 gives {start}; 0 an empty
/// tensor). Computed in double by PyTorch's symmetric formula (the first half counts up from start, the second
/// down from end, so both endpoints are exact), with the same bits on every device, and converted once to
/// dtype (integer dtypes truncate toward zero).
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::f32, Device device = kCPU);
/// Uniform random integers in [low, high) from the Philox generator (the global one by default), in dtype
/// (i64 unless given; any numeric dtype that holds low and high - 1, for floating dtypes exactly: |v| <= 2^24
/// for f32, 2^53 f64, 2^11 f16, 2^8 bf16). Element i takes 64 random bits from
/// Philox counter offset + i/2, so the numbers depend only on (seed, offset, i): the same on the CPU and on
/// every GPU. The draw advances the generator by ceil(numel / 2) counters.
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64, Device device = kCPU,
               Generator* gen = nullptr);
/// randint(0, high, shape, ...).
Tensor randint(int64_t high, const Shape& shape, DType dtype = DType::i64, Device device = kCPU,
               Generator* gen = nullptr);
/// The numbers randint() would produce for (seed, counter offset): the reproducibility contract.
Tensor randint_with_seed(int64_t low, int64_t high, const Shape& shape, uint64_t seed, uint64_t offset,
                         DType dtype = DType::i64, Device device = kCPU);

}  // namespace volt
