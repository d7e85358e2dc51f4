#pragma once
// Elementwise kernels (kernels/cpu/elementwise.cpp, kernels/cuda/elementwise.cu). Operands are views already
// broadcast to out's shape (expanded dims have stride 0), of out's dtype unless said otherwise; any strides.
// The per-element math is kernels/common/elementwise.h.
#include <volt/kernels/backend/kernel.h>
#include <volt/kernels/common/elementwise.h>
#include <volt/kernels/tensor.h>

namespace volt::backend {

struct ElementwiseKernels {
  // out = op(in) (UnaryOp::Fill ignores in's values). Dispatch dtype: out's.
  Kernel<void(UnaryOp op, const Tensor& out, const Tensor& in, const ElemParams& p)> unary;
  // out = op(a, b). Dispatch dtype: out's (numeric; bool has no arithmetic).
  Kernel<void(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, const ElemParams& p)> binary;
  // out (bool) = op(a, b) with a and b of one dtype. Dispatch dtype: a's.
  Kernel<void(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b)> compare;
  // out = cond ? a : b, cond bool. Dispatch dtype: out's.
  Kernel<void(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b)> where;
  // out = in converted to out's dtype (also the strided copy behind contiguous(), clone() and copy_). Any pair of
  // dtypes. Dispatch dtype: out's.
  Kernel<void(const Tensor& out, const Tensor& in)> cast;
};

template <>
struct Family<ElementwiseKernels> {
  static constexpr const char* name = "elementwise";
  static constexpr std::tuple kernels{
      Named{&ElementwiseKernels::unary, "unary"},     Named{&ElementwiseKernels::binary, "binary"},
      Named{&ElementwiseKernels::compare, "compare"}, Named{&ElementwiseKernels::where, "where"},
      Named{&ElementwiseKernels::cast, "cast"}};
};

}  // namespace volt::backend
