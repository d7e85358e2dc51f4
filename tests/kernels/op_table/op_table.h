#pragma once
// The device-generic op table: one row per op, swept over every device (the CPU; each CUDA device when one is
// present, otherwise those cases skip) x dtype (f64, f32, f16, bf16) by tests/kernels/test_op_table.cpp.
//
// A row names the op, says how to make its inputs (shape, value range, an optional non-contiguous view) and
// gives the forward as a lambda over the input tensors. For each (row, device, dtype) case the harness
//   Forward:  runs the op on the device in the dtype and compares with a reference computed on the CPU in f64
//             from the same (dtype-rounded) input values; half-type outputs are compared with the reference
//             rounded to the dtype, with rtol ~1e-2 (f16) / ~2e-2 (bf16) relative to the values' magnitude;
//   Backward: (differentiable rows) backpropagates a fixed random weighting w of the output (the gradient of
//             sum(out * w)) and compares every input's gradient with the f64 CPU reference;
//   FiniteDifferences: (differentiable rows, CPU f64) checks the analytic gradient against central
//             differences (tests/common/gradcheck.h).
//   DoubleBackward: (differentiable rows not marked first_order_only, CPU f64) takes the first gradient with
//             autograd::grad(create_graph=true), weights it with a second fixed random tensor, and checks the
//             gradient of that against central differences of the first gradient.
// Random rows (rand/randn) are compared bit for bit with the CPU in the same dtype instead.
//
// Adding an op = adding one row in one of the op_table_rows_*.cpp files, e.g.
//   r.push_back(row("exp", FWD(exp(x[0])), {U({3, 4}, -2, 2)}));
//   r.push_back(row("log", FWD(log(x[0])), {Pos({3, 4})}));                    // positive inputs
//   r.push_back(row("add_bcast", FWD(add(x[0], x[1])), {U({4, 1, 3}), U({5, 3})}));
//   r.push_back(row("argmax", FWD(argmax(x[0], 1)), {Distinct({3, 5})}).no_grad());
//   r.push_back(row("exp_t", FWD(exp(x[0])), {U({4, 3}).view(transposed)}));  // non-contiguous input
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/gradcheck.h"

namespace volt::optable {

using Inputs = std::vector<Tensor>;

// What the forward lambda may need beyond its inputs (factories such as rand take a device and dtype).
struct Ctx {
  Device device = kCPU;
  DType dtype = DType::f32;
};
using OpFn = std::function<Tensor(const Inputs& x, const Ctx& c)>;
// The forward lambda of a row: `x` are the inputs (views applied), `c` the case's device and dtype.
#define FWD(...) [](const ::volt::optable::Inputs& x, [[maybe_unused]] const ::volt::optable::Ctx& c) -> ::volt::Tensor { return __VA_ARGS__; }
#define FWD_BLOCK [](const ::volt::optable::Inputs& x, [[maybe_unused]] const ::volt::optable::Ctx& c) -> ::volt::Tensor

// One input of a row. Floating inputs are made in f64 from a seed derived from the row name and rounded to
// the case's dtype; integer / bool inputs are the same in every case.
struct In {
  enum class Kind { Uniform, Distinct, Discrete, Index, Mask, Custom };
  Kind kind = Kind::Uniform;
  Shape shape;
  double lo = -1.0, hi = 1.0;  // Uniform range; Distinct step in `lo`
  int64_t limit = 0;           // Index: values in [0, limit)
  std::function<Tensor()> make;                  // Custom: a CPU tensor (floating ones are cast to the dtype)
  std::function<Tensor(const Tensor&)> view_fn;  // applied to the leaf inside the op (non-contiguous inputs)
  bool grad = true;                              // floating inputs of differentiable rows get gradients

  In& view(std::function<Tensor(const Tensor&)> f) { view_fn = std::move(f); return *this; }
  In& no_grad() { grad = false; return *this; }
};
// Uniform in [lo, hi).
inline In U(Shape s, double lo = -1.0, double hi = 1.0) { In i; i.shape = std::move(s); i.lo = lo; i.hi = hi; return i; }
// Uniform in [0.5, 2): for log, sqrt, pow, division.
inline In Pos(Shape s) { return U(std::move(s), 0.5, 2.0); }
// A permutation of distinct multiples of `step` (exact in bf16 for up to 512 elements): no ties for max/argmax.
inline In Distinct(Shape s, double step = 0.125) {
  In i; i.kind = In::Kind::Distinct; i.shape = std::move(s); i.lo = step; return i;
}
// Values from {-1, -0.5, 0, 0.5, 1}: ties on purpose (comparisons).
inline In Discrete(Shape s) { In i; i.kind = In::Kind::Discrete; i.shape = std::move(s); i.grad = false; return i; }
// int64 class / position indices in [0, limit).
inline In Index(Shape s, int64_t limit) {
  In i; i.kind = In::Kind::Index; i.shape = std::move(s); i.limit = limit; i.grad = false; return i;
}
// A bool tensor, about half true.
inline In Mask(Shape s) { In i; i.kind = In::Kind::Mask; i.shape = std::move(s); i.grad = false; return i; }
inline In Custom(std::function<Tensor()> make) { In i; i.kind = In::Kind::Custom; i.make = std::move(make); return i; }

// Common views for non-contiguous inputs.
inline Tensor transposed(const Tensor& t) { return t.transpose(0, 1); }

// Extra checks on a CPU copy of the case's inputs (dtype-rounded, f64) and output (f64), e.g. statistics.
using CheckFn = std::function<void(const Inputs& in, const Tensor& out)>;

struct OpRow {
  std::string name;  // [a-z0-9_]: part of the test name
  OpFn fn;
  std::vector<In> inputs;
  bool differentiable = true;
  std::vector<DType> dtypes{DType::f64, DType::f32, DType::f16, DType::bf16};
  double fwd_tol = 1.0, grad_tol = 1.0;     // multiply the per-dtype tolerances
  double gc_atol = 1e-6, gc_rtol = 1e-5;    // finite-difference check tolerances
  bool gradcheck = true;                    // finite differences (off where the op rounds below f64)
  bool double_backward = true;              // second derivatives (kernels/grad.h) checked too
  std::string first_order_reason;           // why not, printed when the DoubleBackward case skips
  bool exact_ = false;                      // outputs equal the (dtype-rounded) reference exactly
  bool same_dtype_ref = false;              // reference: the CPU in the case's dtype, bit for bit (RNG)
  bool bitwise_devices = false;             // device outputs equal the CPU's in the same dtype bit for bit
  std::optional<DType> out_dtype;           // the output dtype when it is not the case's dtype (casts)
  CheckFn check;

  OpRow& no_grad() { differentiable = false; return *this; }
  OpRow& only(std::vector<DType> d) { dtypes = std::move(d); return *this; }
  OpRow& tol(double fwd, double grad = -1) { fwd_tol = fwd; grad_tol = grad < 0 ? fwd : grad; return *this; }
  OpRow& gradcheck_tol(double atol, double rtol) { gc_atol = atol; gc_rtol = rtol; return *this; }
  OpRow& exact() { exact_ = true; return *this; }
  OpRow& no_gradcheck() { gradcheck = false; return *this; }
  // The op's backward formula is not differentiable (yet): say why; the DoubleBackward case skips saying so.
  OpRow& first_order_only(std::string why) { double_backward = false; first_order_reason = std::move(why); return *this; }
  // Random-number rows: not differentiable, compared bit for bit with the CPU in the same dtype.
  OpRow& random() { same_dtype_ref = true; exact_ = true; differentiable = false; bitwise_devices = true; return *this; }
  OpRow& bitwise_across_devices() { bitwise_devices = true; return *this; }
  OpRow& out(DType d) { out_dtype = d; return *this; }
  OpRow& stats(CheckFn f) { check = std::move(f); return *this; }
};

inline OpRow row(std::string name, OpFn fn, std::vector<In> inputs = {}) {
  OpRow r;
  r.name = std::move(name);
  r.fn = std::move(fn);
  r.inputs = std::move(inputs);
  return r;
}

// The table. Each op_table_rows_*.cpp adds its rows at static initialisation:
//   static const bool kRows = volt::optable::add_rows([](std::vector<OpRow>& r) { r.push_back(...); });
std::vector<OpRow>& registry();
inline bool add_rows(const std::function<void(std::vector<OpRow>&)>& f) {
  f(registry());
  return true;
}

}  // namespace volt::optable
