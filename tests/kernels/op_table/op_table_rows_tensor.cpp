// Op table rows (see op_table.h): the ops of kernels/tensor_ops.h: logsumexp, scans, sort/topk, masking and
// triangles, scatter/index adds, pad, flip, repeat, split/chunk, einsum, norm, std, any/all.
#include <cmath>

#include "kernels/op_table/op_table.h"
#include <volt/kernels/tensor_ops.h>

namespace volt::optable {
namespace {

using D = DType;

// Rows of a cumprod input with zeros: none, one, two (the gradient's three cases), at exact values.
Tensor with_zeros() {
  return from_vector<double>({0.5, -1.25, 0.75, 1.5, -0.5,  //
                              1.25, 0.0, -0.75, 1.5, 0.5,   //
                              0.75, 0.0, 1.5, 0.0, -1.25},
                             {3, 5});
}

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- logsumexp ------------------------------------------------------------------------------------------
  r.push_back(row("logsumexp", FWD(logsumexp(x[0], {1})), {U({3, 5}, -3, 3)}));
  r.push_back(row("logsumexp_all", FWD(logsumexp(x[0])), {U({3, 4}, -3, 3)}));
  r.push_back(row("logsumexp_two_dims_keepdim", FWD(logsumexp(x[0], {0, 2}, true)), {U({2, 3, 4}, -3, 3)}));
  r.push_back(row("logsumexp_transposed", FWD(logsumexp(x[0], {-1})), {U({5, 3}, -3, 3).view(transposed)}));

  // ---- cumsum / cumprod -----------------------------------------------------------------------------------
  r.push_back(row("cumsum", FWD(cumsum(x[0], 1)), {U({3, 6})}));
  r.push_back(row("cumsum_dim0", FWD(cumsum(x[0], 0)), {U({5, 3})}));
  r.push_back(row("cumsum_middle_transposed", FWD(cumsum(x[0], -2)),
                  {U({4, 3, 2}).view([](const Tensor& t) { return t.permute({2, 0, 1}); })}));
  r.push_back(row("cumsum_long", FWD(cumsum(x[0], 1)), {U({2, 300})}).tol(4).no_gradcheck());
  r.push_back(row("cumsum_int", FWD(cumsum(x[0], 1)), {Index({3, 5}, 9)}).no_grad().exact());
  r.push_back(row("cumprod", FWD(cumprod(x[0], 1)), {U({3, 5}, 0.5, 1.5)}).tol(2));
  r.push_back(row("cumprod_dim0_transposed", FWD(cumprod(x[0], 0)), {U({4, 3}, -1.5, 1.5).view(transposed)}).tol(2));
  r.push_back(row("cumprod_zeros", FWD(cumprod(x[0], 1)), {Custom(with_zeros)}).tol(2));

  // ---- sort / topk ----------------------------------------------------------------------------------------
  r.push_back(row("sort", FWD(sort(x[0], 1).first), {Distinct({4, 6})}).exact());
  r.push_back(row("sort_descending_dim0", FWD(sort(x[0], 0, true).first), {Distinct({5, 3})}).exact());
  r.push_back(row("sort_transposed", FWD(sort(x[0], -1).first), {Distinct({6, 4}).view(transposed)}).exact());
  r.push_back(row("sort_indices", FWD(sort(x[0], 1).second), {Discrete({4, 7})}).no_grad().exact());
  r.push_back(row("sort_indices_descending", FWD(sort(x[0], 1, true).second), {Discrete({4, 7})}).no_grad().exact());
  r.push_back(row("sort_long", FWD(sort(x[0], 1).first), {Distinct({2, 300})}).exact().no_gradcheck());
  r.push_back(row("topk", FWD(topk(x[0], 3, 1).first), {Distinct({4, 7})}).exact());
  r.push_back(row("topk_smallest_dim0", FWD(topk(x[0], 2, 0, false).first), {Distinct({5, 3})}).exact());
  r.push_back(row("topk_indices", FWD(topk(x[0], 4, -1).second), {Discrete({3, 9})}).no_grad().exact());

  // ---- masked_fill / tril / triu --------------------------------------------------------------------------
  r.push_back(row("masked_fill", FWD(masked_fill(x[0], x[1], -2.5)), {U({3, 4}), Mask({3, 4})}).exact());
  r.push_back(row("masked_fill_bcast", FWD(masked_fill(x[0], x[1], 0.0)), {U({2, 3, 4}), Mask({3, 1})}).exact());
  r.push_back(row("tril", FWD(tril(x[0])), {U({4, 5})}).exact());
  r.push_back(row("tril_k1_batched", FWD(tril(x[0], 1)), {U({2, 3, 4})}).exact());
  r.push_back(row("triu", FWD(triu(x[0])), {U({5, 4})}).exact());
  r.push_back(row("triu_km1_transposed", FWD(triu(x[0], -1)), {U({4, 5}).view(transposed)}).exact());

  // ---- scatter_add / index_add ----------------------------------------------------------------------------
  // Random indices repeat: duplicates accumulate.
  r.push_back(row("scatter_add", FWD(scatter_add(x[0], 1, x[1], x[2])), {U({3, 5}), Index({3, 4}, 5), U({3, 4})}));
  r.push_back(row("scatter_add_dim0_larger_src", FWD(scatter_add(x[0], 0, x[1], x[2])),
                  {U({4, 3}), Index({6, 2}, 4), U({7, 3})}));
  r.push_back(row("index_add", FWD(index_add(x[0], 0, x[1], x[2])), {U({5, 3}), Index({7}, 5), U({7, 3})}));
  r.push_back(row("index_add_dim1_transposed", FWD(index_add(x[0], 1, x[1], x[2])),
                  {U({4, 3}).view(transposed), Index({6}, 4), U({3, 6})}));

  // ---- pad / flip / repeat / split / chunk ----------------------------------------------------------------
  r.push_back(row("pad_last", FWD(pad(x[0], {1, 2})), {U({2, 3, 4})}).exact());
  r.push_back(row("pad_two_dims_value", FWD(pad(x[0], {1, 0, 2, 1}, 0.5)), {U({2, 3, 4})}).exact());
  r.push_back(row("pad_negative_crops", FWD(pad(x[0], {-1, 1, 0, -2})), {U({4, 5})}).exact());
  r.push_back(row("flip", FWD(flip(x[0], {0, 2})), {U({3, 4, 2})}).exact());
  r.push_back(row("flip_transposed", FWD(flip(x[0], {-1})), {U({5, 3}).view(transposed)}).exact());
  r.push_back(row("repeat", FWD(repeat(x[0], {2, 1, 3})), {U({2, 3})}).exact());
  r.push_back(row("split_last_piece", FWD(split(x[0], 2, 1)[2]), {U({3, 5})}).exact());
  r.push_back(row("split_sizes", FWD(mul(split(x[0], {1, 3}, 0)[1], 2.0)), {U({4, 3})}).exact());
  r.push_back(row("chunk_sum", FWD(add(chunk(x[0], 2, -1)[0], chunk(x[0], 2, -1)[1])), {U({3, 6})}));

  // ---- einsum ---------------------------------------------------------------------------------------------
  r.push_back(row("einsum_matmul", FWD(einsum("ij,jk->ik", {x[0], x[1]})), {U({3, 4}), U({4, 5})}).tol(2));
  r.push_back(row("einsum_bmm", FWD(einsum("bij,bjk->bik", {x[0], x[1]})), {U({2, 3, 4}), U({2, 4, 5})}).tol(2));
  r.push_back(row("einsum_outer", FWD(einsum("i,j->ij", {x[0], x[1]})), {U({3}), U({4})}));
  r.push_back(row("einsum_transpose", FWD(einsum("ij->ji", {x[0]})), {U({3, 4})}).exact());
  r.push_back(row("einsum_sum_rows", FWD(einsum("ij->j", {x[0]})), {U({3, 4})}));
  r.push_back(row("einsum_dot", FWD(einsum("i,i->", {x[0], x[1]})), {U({6}), U({6})}).tol(2));
  r.push_back(row("einsum_attention", FWD(einsum("bhqd,bhkd->bhqk", {x[0], x[1]})),
                  {U({2, 2, 3, 4}), U({2, 2, 5, 4})}).tol(2));
  r.push_back(row("einsum_implicit", FWD(einsum("ij,jk", {x[0], x[1]})), {U({3, 4}), U({4, 2})}).tol(2));
  r.push_back(row("einsum_chain", FWD(einsum("ij,jk,kl->il", {x[0], x[1], x[2]})), {U({2, 3}), U({3, 4}), U({4, 2})})
                  .tol(3));
  r.push_back(row("einsum_bcast_transposed", FWD(einsum("ij,kj->ik", {x[0], x[1]})),
                  {U({4, 3}).view(transposed), U({1, 4})}).tol(2));

  // ---- norm / std -----------------------------------------------------------------------------------------
  r.push_back(row("norm", FWD(norm(x[0])), {U({3, 4})}).tol(2));
  r.push_back(row("norm_p1_dim", FWD(norm(x[0], 1.0, {1})), {U({3, 4})}).tol(2));
  r.push_back(row("norm_inf_dim", FWD(norm(x[0], INFINITY, {0})), {U({4, 3})}).exact());
  r.push_back(row("norm_p3_keepdim", FWD(norm(x[0], 3.0, {1}, true)), {U({3, 5})}).tol(3).gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("norm_p05_transposed", FWD(norm(x[0], 0.5, {0})), {Pos({4, 3}).view(transposed)}).tol(3));
  r.push_back(row("std", FWD(std(x[0], {1})), {U({4, 5})}).tol(3));
  r.push_back(row("std_population_all", FWD(std(x[0], {}, false)), {U({3, 4})}).tol(3));

  // ---- any / all ------------------------------------------------------------------------------------------
  r.push_back(row("any_dim", FWD(any(x[0], {1})), {Discrete({4, 3})}).no_grad().exact());
  r.push_back(row("all_dim_keepdim", FWD(all(x[0], {0}, true)), {Discrete({3, 4})}).no_grad().exact());
  r.push_back(row("any_all_mask", FWD(all(x[0])), {Mask({2, 2})}).no_grad().exact());
});

}  // namespace
}  // namespace volt::optable
