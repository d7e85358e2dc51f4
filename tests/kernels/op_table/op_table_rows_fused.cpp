// Op table rows (see op_table.h): the fused ops of kernels/ops/fused_ops.cpp. residual_layer_norm's two outputs are
// concatenated, so the harness's random weighting of the output sends a gradient into s along both of its paths
// (through y, and as the residual stream itself). The long and many-row cases reach the CUDA kernels' strided
// block loops; the chunked classifier rows cover a last chunk shorter than the others, and linear_cross_entropy's
// rows chunks of one row, a short last chunk and many classes (its weight gradient summed over 3 chunks).
#include "kernels/op_table/op_table.h"
#include <volt/kernels/fused_ops.h>

namespace volt::optable {
namespace {

using D = DType;

Tensor param(const Tensor& t, const Tensor& x) {
  return cast(t, x.dtype() == D::f16 || x.dtype() == D::bf16 ? D::f32 : x.dtype());
}

Tensor both(const std::pair<Tensor, Tensor>& sy) { return cat({sy.first, sy.second}, 0); }

// Targets with the ignored class -1 in rows 1 and 4.
Tensor targets_with_ignored() { return from_vector<int64_t>({2, -1, 0, 4, -1, 1, 3}, {7}); }

FusedCrossEntropyOptions opts(Reduction red, int64_t ignore, int64_t chunk) {
  FusedCrossEntropyOptions o;
  o.reduction = red;
  o.ignore_index = ignore;
  o.chunk_rows = chunk;
  return o;
}

// linear_cross_entropy's gradients are formed in the forward from logits that are then dropped.
const char* const kHeadFirstOrder = "the gradients are formed in the forward, from logits not kept";

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- residual_layer_norm -------------------------------------------------------------------------------------
  r.push_back(row("residual_layer_norm", FWD(both(residual_layer_norm(x[0], x[1], x[2], x[3]))),
                  {U({4, 6}, -2, 2), U({4, 6}, -1, 1), U({6}, 0.5, 1.5), U({6})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("residual_layer_norm_3d_no_affine", FWD(both(residual_layer_norm(x[0], x[1]))),
                  {U({2, 3, 5}, -1, 3), U({2, 3, 5})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("residual_layer_norm_transposed_eps", FWD(both(residual_layer_norm(x[0], x[1], x[2], Tensor(),
                                                                                     1e-3))),
                  {U({5, 4}, -2, 2).view(transposed), U({4, 5}), U({5}, 0.5, 1.5)})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("residual_layer_norm_fp32_params",
                  FWD(both(residual_layer_norm(x[0], x[1], param(x[2], x[0]), param(x[3], x[0])))),
                  {U({3, 6}, -2, 2), U({3, 6}), U({6}, 0.5, 1.5), U({6})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("residual_layer_norm_long_row", FWD(both(residual_layer_norm(x[0], x[1], x[2], x[3]))),
                  {U({3, 700}, -2, 2), U({3, 700}), U({700}, 0.5, 1.5), U({700})})
                  .tol(6)
                  .no_gradcheck());
  // GPT-2's width with f32 parameters for half x: CUDA's warp-per-row kernels in every floating dtype but f64.
  r.push_back(row("residual_layer_norm_gpt2_width",
                  FWD(both(residual_layer_norm(x[0], x[1], param(x[2], x[0]), param(x[3], x[0])))),
                  {U({4, 768}, -2, 2), U({4, 768}), U({768}, 0.5, 1.5), U({768})})
                  .tol(6)
                  .no_gradcheck());
  r.push_back(row("residual_layer_norm_many_rows", FWD(both(residual_layer_norm(x[0], x[1], x[2], x[3]))),
                  {U({300, 40}, -2, 2), U({300, 40}), U({40}, 0.5, 1.5), U({40})})
                  .tol(6)
                  .no_gradcheck());

  // ---- fused_cross_entropy -------------------------------------------------------------------------------------
  r.push_back(row("fused_cross_entropy", FWD(fused_cross_entropy(x[0], x[1])), {U({6, 5}, -2, 2), Index({6}, 5)})
                  .tol(2));
  r.push_back(row("fused_cross_entropy_sum_ignored_chunked",
                  FWD(fused_cross_entropy(x[0], x[1], opts(Reduction::Sum, -1, 3))),
                  {U({7, 5}, -2, 2), Custom(targets_with_ignored)})
                  .tol(2));
  r.push_back(row("fused_cross_entropy_mean_ignored_chunked",
                  FWD(fused_cross_entropy(x[0], x[1], opts(Reduction::Mean, -1, 2))),
                  {U({7, 5}, -2, 2), Custom(targets_with_ignored)})
                  .tol(2));
  r.push_back(row("fused_cross_entropy_many_classes", FWD(fused_cross_entropy(x[0], x[1], opts(Reduction::Mean, -100,
                                                                                             0))),
                  {U({4, 700}, -3, 3), Index({4}, 700)})
                  .tol(4)
                  .no_gradcheck());
  r.push_back(row("fused_cross_entropy_many_rows", FWD(fused_cross_entropy(x[0], x[1], opts(Reduction::Sum, -100, 64))),
                  {U({300, 9}, -3, 3), Index({300}, 9)})
                  .tol(4)
                  .no_gradcheck());

  // ---- linear_cross_entropy ------------------------------------------------------------------------------------
  r.push_back(row("linear_cross_entropy", FWD(linear_cross_entropy(x[0], x[1], x[2])),
                  {U({6, 4}, -1, 1), U({5, 4}, -1, 1), Index({6}, 5)})
                  .tol(4)
                  .first_order_only(kHeadFirstOrder));
  r.push_back(row("linear_cross_entropy_sum_ignored_chunked",
                  FWD(linear_cross_entropy(x[0], x[1], x[2], {Reduction::Sum, -1, 3})),
                  {U({7, 3}, -1, 1), U({5, 3}, -1, 1), Custom(targets_with_ignored)})
                  .tol(4)
                  .first_order_only(kHeadFirstOrder));
  r.push_back(row("linear_cross_entropy_mean_ignored_rows",
                  FWD(linear_cross_entropy(x[0], x[1], x[2], {Reduction::Mean, -1, 1})),
                  {U({7, 3}, -1, 1), U({5, 3}, -1, 1), Custom(targets_with_ignored)})
                  .tol(4)
                  .first_order_only(kHeadFirstOrder));
  r.push_back(row("linear_cross_entropy_many_classes",
                  FWD(linear_cross_entropy(x[0], x[1], x[2], {Reduction::Mean, -100, 16})),
                  {U({40, 24}, -1, 1), U({700, 24}, -1, 1), Index({40}, 700)})
                  .tol(6)
                  .no_gradcheck());
});

}  // namespace
}  // namespace volt::optable
