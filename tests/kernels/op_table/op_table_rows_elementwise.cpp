// Op table rows (see op_table.h): unary and binary elementwise ops, broadcasting, non-contiguous inputs,
// comparisons / where, and casts.
#include "kernels/op_table/op_table.h"

namespace volt::optable {
namespace {

using D = DType;

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- unary -------------------------------------------------------------------------------------------
  r.push_back(row("neg", FWD(neg(x[0])), {U({3, 4})}));
  r.push_back(row("exp", FWD(exp(x[0])), {U({3, 4}, -2, 2)}));
  r.push_back(row("log", FWD(log(x[0])), {Pos({3, 4})}));
  r.push_back(row("sqrt", FWD(sqrt(x[0])), {Pos({3, 4})}));
  r.push_back(row("abs", FWD(abs(x[0])), {U({3, 4})}));
  r.push_back(row("square", FWD(square(x[0])), {U({3, 4})}));
  r.push_back(row("sign", FWD(sign(x[0])), {Discrete({3, 4})}).no_grad().exact());
  r.push_back(row("relu", FWD(relu(x[0])), {U({3, 4})}));
  r.push_back(row("leaky_relu", FWD(leaky_relu(x[0], 0.1)), {U({3, 4})}));
  r.push_back(row("sigmoid", FWD(sigmoid(x[0])), {U({3, 4}, -3, 3)}));
  r.push_back(row("tanh", FWD(tanh(x[0])), {U({3, 4}, -2, 2)}));
  r.push_back(row("gelu", FWD(gelu(x[0])), {U({3, 4}, -3, 3)}));
  r.push_back(row("gelu_tanh", FWD(gelu(x[0], GeluApproximate::Tanh)), {U({3, 4}, -3, 3)}));
  r.push_back(row("silu", FWD(silu(x[0])), {U({3, 4}, -4, 4)}));
  r.push_back(row("silu_transposed", FWD(silu(x[0])), {U({5, 3}, -3, 3).view(transposed)}));
  r.push_back(row("pow_scalar", FWD(pow(x[0], 2.5)), {Pos({3, 4})}));
  r.push_back(row("pow_scalar_neg", FWD(pow(x[0], -1.5)), {Pos({3, 4})}));
  r.push_back(row("clamp", FWD(clamp(x[0], -0.5, 0.6)), {U({3, 4})}));
  r.push_back(row("clamp_lo", FWD(clamp(x[0], 0.1, std::nullopt)), {U({3, 4})}));
  // scalar arithmetic
  r.push_back(row("add_scalar", FWD(add(x[0], 1.5)), {U({3, 4})}));
  r.push_back(row("rsub_scalar", FWD(rsub(x[0], 2.0)), {U({3, 4})}));
  r.push_back(row("mul_scalar", FWD(mul(x[0], -3.0)), {U({3, 4})}));
  r.push_back(row("rdiv_scalar", FWD(rdiv(x[0], 2.0)), {Pos({3, 4})}));
  // non-contiguous inputs
  r.push_back(row("exp_transposed", FWD(exp(x[0])), {U({4, 3}).view(transposed)}));
  r.push_back(row("sigmoid_sliced", FWD(sigmoid(x[0])), {U({4, 6}, -3, 3).view([](const Tensor& t) {
                    return t.slice(1, 1, 6, 2);
                  })}));
  r.push_back(row("tanh_expanded", FWD(tanh(x[0])), {U({1, 3}).view([](const Tensor& t) {
                    return t.expand({4, 3});
                  })}));
  r.push_back(row("gelu_permuted", FWD(gelu(x[0])), {U({2, 3, 4}, -2, 2).view([](const Tensor& t) {
                    return t.permute({2, 0, 1});
                  })}));

  // ---- binary, with broadcasting -----------------------------------------------------------------------
  r.push_back(row("add", FWD(add(x[0], x[1])), {U({3, 4}), U({3, 4})}));
  r.push_back(row("add_bcast", FWD(add(x[0], x[1])), {U({4, 1, 3}), U({5, 3})}));
  r.push_back(row("sub_bcast", FWD(sub(x[0], x[1])), {U({4, 1, 3}), U({5, 3})}));
  r.push_back(row("mul_bcast", FWD(mul(x[0], x[1])), {U({4, 1, 3}), U({5, 3})}));
  r.push_back(row("div_bcast", FWD(div(x[0], x[1])), {U({4, 1, 3}), Pos({5, 3})}));
  r.push_back(row("pow_bcast", FWD(pow(x[0], x[1])), {Pos({4, 1, 3}), U({5, 3}, -1.5, 1.5)}));
  r.push_back(row("maximum_bcast", FWD(maximum(x[0], x[1])), {U({4, 1, 3}), U({5, 3})}));
  r.push_back(row("minimum_bcast", FWD(minimum(x[0], x[1])), {U({4, 1, 3}), U({5, 3})}));
  r.push_back(row("add_row_vector", FWD(add(x[0], x[1])), {U({4, 5}), U({5})}));
  r.push_back(row("mul_scalar_tensor", FWD(mul(x[0], x[1])), {U({3, 4}), U({})}));
  r.push_back(row("add_transposed", FWD(add(x[0], x[1])), {U({4, 3}).view(transposed), U({3, 4})}));
  r.push_back(row("mul_transposed_both", FWD(mul(x[0], x[1])),
                  {U({4, 3}).view(transposed), U({4, 3}).view(transposed)}));
  r.push_back(row("sub_sliced_bcast", FWD(sub(x[0], x[1])),
                  {U({5, 8}).view([](const Tensor& t) { return t.slice(1, 0, 8, 3).unsqueeze(0); }),
                   U({2, 5, 1})}));
  r.push_back(row("div_expanded", FWD(div(x[0], x[1])),
                  {U({3, 4}), Pos({3, 1}).view([](const Tensor& t) { return t.expand({3, 4}); })}));

  // ---- comparisons and where ---------------------------------------------------------------------------
  r.push_back(row("eq", FWD(eq(x[0], x[1])), {Discrete({4, 5}), Discrete({4, 5})}).no_grad());
  r.push_back(row("ne_bcast", FWD(ne(x[0], x[1])), {Discrete({3, 1, 5}), Discrete({4, 5})}).no_grad());
  r.push_back(row("lt", FWD(lt(x[0], x[1])), {Discrete({4, 5}), Discrete({4, 5})}).no_grad());
  r.push_back(row("le_transposed", FWD(le(x[0], x[1])),
                  {Discrete({5, 4}).view(transposed), Discrete({4, 5})}).no_grad());
  r.push_back(row("gt_scalar", FWD(gt(x[0], 0.0)), {Discrete({4, 5})}).no_grad());
  r.push_back(row("ge_scalar", FWD(ge(x[0], 0.5)), {Discrete({4, 5})}).no_grad());
  r.push_back(row("where", FWD(where(x[0], x[1], x[2])), {Mask({3, 4}), U({3, 4}), U({3, 4})}));
  r.push_back(row("where_bcast", FWD(where(x[0], x[1], x[2])), {Mask({4, 1}), U({3, 4, 5}), U({5})}));
  r.push_back(row("where_from_compare", FWD(where(gt(x[0], x[1]), x[0], mul(x[1], 2.0))), {U({4, 5}), U({4, 5})}));

  // ---- casts: every float dtype to every dtype, and integer / bool to float ------------------------------
  const std::vector<std::pair<const char*, D>> targets{
      {"f32", D::f32}, {"f16", D::f16}, {"bf16", D::bf16}, {"f64", D::f64}};
  for (const auto& target : targets) {
    const char* n = target.first;
    const D d = target.second;  // a plain variable: clang 14 cannot capture structured bindings
    // Between floating types casts are differentiable (the gradient is cast back). Rounding to a narrower
    // type defeats finite differences: those rows check gradients against the reference only.
    OpRow c = row(std::string("cast_to_") + n, [d](const Inputs& x, const Ctx&) { return cast(x[0], d); },
                  {U({3, 5}, -4, 4)}).out(d);
    if (d != D::f64) c.no_gradcheck();
    r.push_back(c);
  }
  // Float -> integer truncates toward zero; values stay inside each type's range.
  r.push_back(row("cast_to_i64", FWD(cast(x[0], D::i64)), {U({4, 5}, -50, 50)}).no_grad().exact());
  r.push_back(row("cast_to_i32", FWD(cast(x[0], D::i32)), {U({4, 5}, -50, 50)}).no_grad().exact());
  r.push_back(row("cast_to_u8", FWD(cast(x[0], D::u8)), {U({4, 5}, 0, 200)}).no_grad().exact());
  r.push_back(row("cast_to_bool", FWD(cast(x[0], D::boolean)), {Discrete({4, 5})}).no_grad().exact());
  r.push_back(row("cast_transposed_to_i64", FWD(cast(x[0], D::i64)), {U({5, 4}, -9, 9).view(transposed)})
                  .no_grad().exact());
  // Integer / bool -> the case's float dtype (small integers are exact in every float type).
  r.push_back(row("cast_i64_to_float", FWD(cast(x[0], c.dtype)), {Index({4, 5}, 100)}).no_grad().exact());
  r.push_back(row("cast_i32_to_float", FWD(cast(cast(x[0], D::i32), c.dtype)), {Index({4, 5}, 100)})
                  .no_grad().exact());
  r.push_back(row("cast_u8_to_float", FWD(cast(cast(x[0], D::u8), c.dtype)), {Index({4, 5}, 250)})
                  .no_grad().exact());
  r.push_back(row("cast_bool_to_float", FWD(cast(x[0], c.dtype)), {Mask({4, 5})}).no_grad().exact());
  // Integer <-> integer (independent of the case dtype: f32 cases only).
  r.push_back(row("cast_int_to_int", FWD(stack({cast(cast(x[0], D::i32), D::i64), cast(cast(x[0], D::u8), D::i64),
                                                cast(cast(x[0], D::boolean), D::i64),
                                                cast(cast(cast(x[0], D::i32), D::u8), D::i64)})),
                  {Index({4, 5}, 200)})
                  .no_grad().exact().only({D::f32}));
  // Float -> integer beyond the target's range, infinities and NaN: defined the same on every device (NaN -> 0,
  // truncate and clamp to int64, then wrap), where C++ and the hardware leave them to disagree. The inputs are
  // 8 * (k - 50) for k in [0, 100): exact in every float type, as are their products with powers of two.
  auto spread = [](const Tensor& k, D d) { return mul(sub(cast(k, d), 50.0), 8.0); };
  r.push_back(row("cast_out_of_range_to_int",
                  [spread](const Inputs& x, const Ctx& c) {
                    Tensor v = spread(x[0], c.dtype);
                    return stack({cast(cast(v, D::u8), D::i64), cast(div(v, v), D::i64),           // 0/0: NaN
                                  cast(div(v, mul(v, 0.0)), D::i64), cast(cast(v, D::i32), D::i64)});  // +-inf
                  },
                  {Index({4, 5}, 100)})
                  .no_grad().exact());
  // Beyond int32 (f16 would overflow to infinity, which the row above covers).
  r.push_back(row("cast_beyond_i32",
                  [spread](const Inputs& x, const Ctx& c) {
                    return cast(cast(mul(spread(x[0], c.dtype), 1099511627776.0), D::i32), D::i64);  // 2^40
                  },
                  {Index({4, 5}, 100)})
                  .no_grad().exact().only({D::f32, D::f64, D::bf16}));
});

}  // namespace
}  // namespace volt::optable
