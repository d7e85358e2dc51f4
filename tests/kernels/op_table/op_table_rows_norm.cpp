// Op table rows (see op_table.h): layer_norm, group_norm and embedding with a padding index. The long and
// many-row cases reach the CUDA kernels' multi-pass block reductions and the column-sum parameter gradients; the
// GPT-2 width row the warp-per-row kernels (kernels/cuda/warp_rows.cuh).
#include "kernels/op_table/op_table.h"

namespace volt::optable {
namespace {

using D = DType;

// f32 parameters for half x (the mixed-precision layout), the case's dtype otherwise.
Tensor param(const Tensor& t, const Tensor& x) {
  return cast(t, x.dtype() == D::f16 || x.dtype() == D::bf16 ? D::f32 : x.dtype());
}

// Indices that include the padding row (3) several times.
Tensor padded_indices() { return from_vector<int64_t>({3, 0, 3, 6, 1, 3}, {2, 3}); }

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- layer_norm -----------------------------------------------------------------------------------------
  r.push_back(row("layer_norm", FWD(layer_norm(x[0], {6}, x[1], x[2])), {U({4, 6}, -2, 2), U({6}, 0.5, 1.5), U({6})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("layer_norm_two_dims", FWD(layer_norm(x[0], {4, 5}, x[1], x[2])),
                  {U({2, 3, 4, 5}, -2, 2), U({4, 5}, 0.5, 1.5), U({4, 5})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("layer_norm_no_affine", FWD(layer_norm(x[0], {7})), {U({3, 7}, -1, 3)})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("layer_norm_weight_only_transposed", FWD(layer_norm(x[0], {5}, x[1])),
                  {U({5, 4}, -2, 2).view(transposed), U({5}, 0.5, 1.5)})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("layer_norm_fp32_params", FWD(layer_norm(x[0], {6}, param(x[1], x[0]), param(x[2], x[0]))),
                  {U({3, 6}, -2, 2), U({6}, 0.5, 1.5), U({6})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("layer_norm_long_row", FWD(layer_norm(x[0], {700}, x[1], x[2])),
                  {U({3, 700}, -2, 2), U({700}, 0.5, 1.5), U({700})})
                  .tol(6)
                  .no_gradcheck());
  // GPT-2's width with f32 parameters for half x: CUDA's warp-per-row kernels in every floating dtype but f64.
  r.push_back(row("layer_norm_gpt2_width", FWD(layer_norm(x[0], {768}, param(x[1], x[0]), param(x[2], x[0]))),
                  {U({4, 768}, -2, 2), U({768}, 0.5, 1.5), U({768})})
                  .tol(6)
                  .no_gradcheck());
  r.push_back(row("layer_norm_many_rows", FWD(layer_norm(x[0], {40}, x[1], x[2])),
                  {U({300, 40}, -2, 2), U({40}, 0.5, 1.5), U({40})})
                  .tol(6)
                  .no_gradcheck());

  // ---- group_norm -----------------------------------------------------------------------------------------
  r.push_back(row("group_norm", FWD(group_norm(x[0], 3, x[1], x[2])),
                  {U({2, 6, 3, 2}, -2, 2), U({6}, 0.5, 1.5), U({6})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("group_norm_2d", FWD(group_norm(x[0], 2, x[1], x[2])), {U({4, 6}, -2, 2), U({6}, 0.5, 1.5), U({6})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("group_norm_no_affine", FWD(group_norm(x[0], 2)), {U({2, 4, 5}, -1, 3)})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("group_norm_fp32_params", FWD(group_norm(x[0], 1, param(x[1], x[0]), param(x[2], x[0]))),
                  {U({3, 4, 5}, -2, 2), U({4}, 0.5, 1.5), U({4})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("group_norm_long", FWD(group_norm(x[0], 4, x[1], x[2])),
                  {U({2, 8, 16, 16}, -2, 2), U({8}, 0.5, 1.5), U({8})})
                  .tol(6)
                  .no_gradcheck());

  // ---- embedding with padding_idx ---------------------------------------------------------------------------
  // The padding row's gradient is zero by definition (not the derivative of the forward, which reads the row),
  // so this row checks devices against the CPU but not finite differences.
  r.push_back(row("embedding_padding_idx", FWD(embedding(x[0], x[1], 3)), {U({7, 4}), Custom(padded_indices)})
                  .no_gradcheck());
  r.push_back(row("embedding_padding_idx_negative_i32", FWD(embedding(x[0], cast(x[1], D::i32), -1)),
                  {U({7, 4}), Index({9}, 7)})
                  .no_gradcheck());
});

}  // namespace
}  // namespace volt::optable
