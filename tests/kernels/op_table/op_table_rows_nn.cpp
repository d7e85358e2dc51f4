// Op table rows (see op_table.h): reductions, softmax and losses, matmul / linear, convolution, pooling,
// batch norm, indexing, joining and views.
#include "kernels/op_table/op_table.h"
#include <volt/kernels/fused_ops.h>

namespace volt::optable {
namespace {

using D = DType;

// Cross-entropy targets with one ignored row.
Tensor ce_target() { return from_vector<int64_t>({0, 4, -100, 2, 1, 3}, {6}); }

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- reductions ----------------------------------------------------------------------------------------
  r.push_back(row("sum_all", FWD(sum(x[0])), {U({4, 5})}).tol(2));
  r.push_back(row("sum_dim1", FWD(sum(x[0], {1})), {U({3, 4, 5})}).tol(2));
  r.push_back(row("sum_dims02_keepdim", FWD(sum(x[0], {0, 2}, true)), {U({3, 4, 5})}).tol(2));
  r.push_back(row("sum_transposed", FWD(sum(x[0], {0})), {U({6, 4}).view(transposed)}).tol(2));
  r.push_back(row("mean_all", FWD(mean(x[0])), {U({4, 5})}).tol(2));
  r.push_back(row("mean_dim_keepdim", FWD(mean(x[0], {-1}, true)), {U({3, 4, 5})}).tol(2));
  r.push_back(row("mean_dims01", FWD(mean(x[0], {0, 1})), {U({3, 4, 5})}).tol(2));
  r.push_back(row("var_dim", FWD(var(x[0], {1})), {U({4, 6})}).tol(3));
  r.push_back(row("var_all_population", FWD(var(x[0], {}, 0)), {U({4, 6})}).tol(3));
  r.push_back(row("var_keepdim_expanded", FWD(var(x[0], {0}, 1, true)),
                  {U({1, 5}).view([](const Tensor& t) { return add(t.expand({4, 5}), 0.0); })}).tol(3));
  r.push_back(row("max_dim", FWD(max(x[0], 1).first), {Distinct({4, 6})}));
  r.push_back(row("max_dim_keepdim", FWD(max(x[0], 0, true).first), {Distinct({4, 6})}));
  r.push_back(row("min_dim", FWD(min(x[0], -1).first), {Distinct({3, 4, 5})}));
  r.push_back(row("max_dim_indices", FWD(max(x[0], 1).second), {Distinct({4, 6})}).no_grad());
  r.push_back(row("min_dim_indices", FWD(min(x[0], 0).second), {Distinct({4, 6})}).no_grad());
  r.push_back(row("max_all", FWD(max(x[0])), {Distinct({4, 6})}));
  r.push_back(row("min_all", FWD(min(x[0])), {Distinct({4, 6})}));
  r.push_back(row("argmax", FWD(argmax(x[0], 1)), {Distinct({4, 6})}).no_grad());
  r.push_back(row("argmax_keepdim", FWD(argmax(x[0], 0, true)), {Distinct({4, 6})}).no_grad());
  r.push_back(row("argmin_transposed", FWD(argmin(x[0], 1)), {Distinct({6, 4}).view(transposed)}).no_grad());
  // Long rows: the CUDA block-per-output paths (arg reductions over more than 64 elements, row sums).
  r.push_back(row("argmax_long_row", FWD(argmax(x[0], 1)), {Distinct({2, 256})}).no_grad());
  r.push_back(row("min_dim_long_row", FWD(min(x[0], 1).first), {Distinct({2, 256})}));
  r.push_back(row("max_dim_long_col", FWD(max(x[0], 0).first), {Distinct({256, 2})}));
  r.push_back(row("sum_long_rows", FWD(sum(x[0], {1})), {U({3, 700})}).tol(4).no_gradcheck());
  r.push_back(row("sum_long_cols", FWD(sum(x[0], {0})), {U({700, 3})}).tol(4).no_gradcheck());
  r.push_back(row("mean_all_long", FWD(mean(x[0])), {U({40, 60})}).tol(4).no_gradcheck());

  // ---- softmax and losses --------------------------------------------------------------------------------
  r.push_back(row("softmax", FWD(softmax(x[0], 1)), {U({4, 6}, -3, 3)}).tol(1, 6));
  r.push_back(row("softmax_dim0", FWD(softmax(x[0], 0)), {U({2, 3, 4}, -3, 3)}).tol(1, 6));
  r.push_back(row("softmax_transposed", FWD(softmax(x[0], 1)), {U({6, 4}, -3, 3).view(transposed)}).tol(1, 6));
  r.push_back(row("softmax_long_row", FWD(softmax(x[0], -1)), {U({2, 700}, -3, 3)}).tol(1, 6).no_gradcheck());
  r.push_back(row("log_softmax", FWD(log_softmax(x[0], 1)), {U({4, 6}, -3, 3)}).tol(1, 6));
  r.push_back(row("log_softmax_dim_last", FWD(log_softmax(x[0], -1)), {U({2, 3, 5}, -3, 3)}).tol(1, 6));
  r.push_back(row("cross_entropy", FWD(cross_entropy(x[0], x[1])), {U({6, 5}, -2, 2), Index({6}, 5)}).tol(2));
  r.push_back(row("cross_entropy_sum_ignore_smooth", FWD(cross_entropy(x[0], x[1], Reduction::Sum, -100, 0.1)),
                  {U({6, 5}, -2, 2), Custom(ce_target)}).tol(2));
  r.push_back(row("cross_entropy_none_spatial", FWD(cross_entropy(x[0], x[1], Reduction::None)),
                  {U({2, 4, 3}, -2, 2), Index({2, 3}, 4)}).tol(2));
  r.push_back(row("cross_entropy_many_classes", FWD(cross_entropy(x[0], x[1], Reduction::Mean, -100, 0.05)),
                  {U({3, 300}, -2, 2), Index({3}, 300)}).tol(2).no_gradcheck());
  r.push_back(row("nll_loss", FWD(nll_loss(x[0], x[1])), {U({6, 5}, -3, 0), Index({6}, 5)}).tol(2));
  r.push_back(row("nll_loss_sum_ignore", FWD(nll_loss(x[0], x[1], Reduction::Sum)), {U({6, 5}, -3, 0), Custom(ce_target)})
                  .tol(2));
  r.push_back(row("nll_loss_none", FWD(nll_loss(x[0], x[1], Reduction::None)), {U({6, 5}, -3, 0), Index({6}, 5)}));
  r.push_back(row("mse_loss", FWD(mse_loss(x[0], x[1])), {U({4, 5}), U({4, 5})}).tol(2));
  r.push_back(row("mse_loss_sum", FWD(mse_loss(x[0], x[1], Reduction::Sum)), {U({4, 5}), U({4, 5})}).tol(2));
  r.push_back(row("mse_loss_none_transposed", FWD(mse_loss(x[0], x[1], Reduction::None)),
                  {U({5, 4}).view(transposed), U({4, 5})}));

  // ---- matmul / linear -----------------------------------------------------------------------------------
  r.push_back(row("matmul", FWD(matmul(x[0], x[1])), {U({4, 6}), U({6, 5})}).tol(2));
  r.push_back(row("matmul_dot", FWD(matmul(x[0], x[1])), {U({7}), U({7})}).tol(2));
  r.push_back(row("matmul_batched_bcast", FWD(matmul(x[0], x[1])), {U({2, 1, 3, 4}), U({3, 4, 2})}).tol(2));
  r.push_back(row("matmul_transposed", FWD(matmul(x[0], x[1])),
                  {U({6, 4}).view(transposed), U({5, 6}).view(transposed)}).tol(2));
  r.push_back(row("linear", FWD(linear(x[0], x[1], x[2])), {U({3, 5}), U({4, 5}), U({4})}).tol(2));
  r.push_back(row("linear_3d_nobias", FWD(linear(x[0], x[1])), {U({2, 3, 5}), U({4, 5})}).tol(2));
  // The fused linear layer, linear(x, w, b, act): each activation with and without bias, 2-D and 3-D, a
  // transposed x. 8 outputs take cuBLASLt's GELU aux epilogue on CUDA, 4 the fallback kernel.
  r.push_back(row("linear_act_none_t", FWD(linear(x[0], x[1], x[2], Activation::None)),
                  {U({5, 3}).view(transposed), U({4, 5}), U({4})}).tol(2));
  r.push_back(row("linear_relu", FWD(linear(x[0], x[1], x[2], Activation::ReLU)), {U({3, 5}), U({4, 5}), U({4})})
                  .tol(2));
  r.push_back(row("linear_relu_3d_nobias", FWD(linear(x[0], x[1], Tensor(), Activation::ReLU)),
                  {U({2, 3, 5}), U({8, 5})}).tol(2));
  r.push_back(row("linear_relu_t", FWD(linear(x[0], x[1], x[2], Activation::ReLU)),
                  {U({5, 3}).view(transposed), U({8, 5}), U({8})}).tol(2));
  r.push_back(row("linear_gelu", FWD(linear(x[0], x[1], x[2], Activation::GELU)), {U({3, 5}), U({8, 5}), U({8})})
                  .tol(2));
  r.push_back(row("linear_gelu_3d_nobias", FWD(linear(x[0], x[1], Tensor(), Activation::GELU)),
                  {U({2, 3, 5}), U({4, 5})}).tol(2));
  r.push_back(row("linear_gelu_tanh", FWD(linear(x[0], x[1], x[2], Activation::GELUTanh)),
                  {U({3, 5}), U({8, 5}), U({8})}).tol(2));
  r.push_back(row("linear_gelu_tanh_3d_nobias", FWD(linear(x[0], x[1], Tensor(), Activation::GELUTanh)),
                  {U({2, 3, 5}), U({4, 5})}).tol(2));
  r.push_back(row("linear_gelu_tanh_t", FWD(linear(x[0], x[1], x[2], Activation::GELUTanh)),
                  {U({5, 3}).view(transposed), U({4, 5}), U({4})}).tol(2));

  // fused_mlp (kernels/fused_ops.h): the GELU between the layers recomputed in the backward.
  r.push_back(row("fused_mlp_gelu_tanh", FWD(fused_mlp(x[0], x[1], x[2], x[3], x[4], Activation::GELUTanh)),
                  {U({3, 5}), U({8, 5}), U({8}), U({4, 8}), U({4})}).tol(2));
  r.push_back(row("fused_mlp_gelu_3d_nobias", FWD(fused_mlp(x[0], x[1], Tensor(), x[2], Tensor(), Activation::GELU)),
                  {U({2, 3, 5}), U({8, 5}), U({4, 8})}).tol(2));

  // ---- convolution, pooling, batch norm ------------------------------------------------------------------
  // The bias gradient is a plain reduction over (N, H, W): covered in every dtype.
  r.push_back(row("conv2d_bias", FWD(conv2d(x[0], x[1], x[2])), {U({2, 3, 5, 5}), U({4, 3, 3, 3}), U({4})})
                  .tol(3)
                  .gradcheck_tol(1e-5, 1e-5));
  r.push_back(row("conv2d_stride_pad_dilation", FWD(conv2d(x[0], x[1], x[2], {2, 1}, {1, 1}, {1, 2})),
                  {U({2, 2, 6, 5}), U({3, 2, 3, 2}), U({3})})
                  .tol(3)
                  .gradcheck_tol(1e-5, 1e-5));
  r.push_back(row("conv2d_nobias", FWD(conv2d(x[0], x[1])), {U({1, 2, 4, 4}), U({2, 2, 2, 2})}).tol(3));
  r.push_back(row("max_pool2d", FWD(max_pool2d(x[0], {2, 2})), {Distinct({2, 2, 4, 4}, 0.0625)}));
  r.push_back(row("max_pool2d_stride_pad", FWD(max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1})),
                  {Distinct({1, 2, 5, 5}, 0.0625)}));
  r.push_back(row("max_pool2d_unbatched", FWD(max_pool2d(x[0], {2, 3}, {1, 2})), {Distinct({2, 4, 5}, 0.0625)}));
  r.push_back(row("avg_pool2d", FWD(avg_pool2d(x[0], {2, 2})), {U({2, 2, 4, 4})}).tol(2));
  r.push_back(row("avg_pool2d_stride_pad", FWD(avg_pool2d(x[0], {3, 3}, {2, 1}, {1, 1})), {U({1, 2, 5, 4})}).tol(2));
  r.push_back(row("batch_norm_train", FWD(batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true)),
                  {U({4, 3, 2, 2}), U({3}, 0.5, 1.5), U({3})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  r.push_back(row("batch_norm_train_2d", FWD(batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true)),
                  {U({6, 4}), U({4}, 0.5, 1.5), U({4})})
                  .tol(4)
                  .gradcheck_tol(1e-5, 1e-4));
  // The running statistics after one training step (f32 for half inputs), as one tensor.
  r.push_back(row("batch_norm_running_stats", FWD_BLOCK {
                    const D pdt = (x[0].dtype() == D::f64) ? D::f64 : D::f32;
                    Tensor rm = zeros({3}, pdt, x[0].device()), rv = ones({3}, pdt, x[0].device());
                    batch_norm(x[0], Tensor(), Tensor(), rm, rv, true, 0.1);
                    return cast(cat({rm, rv}), x[0].dtype());
                  },
                  {U({4, 3, 2, 2}, 0, 2)})
                  .no_grad()
                  .tol(2));
  // Evaluation mode with running statistics (kept in f32 for half x); weight and bias in x's dtype.
  r.push_back(row("batch_norm_eval", FWD_BLOCK {
                    const D pdt = (x[0].dtype() == D::f64) ? D::f64 : D::f32;
                    return batch_norm(x[0], x[1], x[2], cast(x[3], pdt), cast(x[4], pdt), false);
                  },
                  {U({4, 3, 2, 2}), U({3}, 0.5, 1.5), U({3}), U({3}).no_grad(), Pos({3}).no_grad()})
                  .tol(2));

  // ---- indexing ------------------------------------------------------------------------------------------
  r.push_back(row("embedding", FWD(embedding(x[0], x[1])), {U({7, 4}), Index({2, 5}, 7)}));
  r.push_back(row("index_select", FWD(index_select(x[0], 1, x[1])), {U({3, 6}), Index({8}, 6)}));
  r.push_back(row("index_select_dim0_transposed", FWD(index_select(x[0], 0, x[1])),
                  {U({5, 4}).view(transposed), Index({6}, 4)}));
  r.push_back(row("index_select_i32", FWD(index_select(x[0], 0, cast(x[1], D::i32))), {U({5, 3}), Index({4}, 5)}));
  r.push_back(row("gather", FWD(gather(x[0], 1, x[1])), {U({4, 5}), Index({4, 3}, 5)}));
  r.push_back(row("gather_dim0", FWD(gather(x[0], 0, x[1])), {U({3, 4, 2}), Index({5, 4, 2}, 3)}));
  r.push_back(row("one_hot", FWD(one_hot(x[0], 6)), {Index({2, 5}, 6)}).no_grad().only({D::f32}));

  // ---- joining and views ---------------------------------------------------------------------------------
  r.push_back(row("cat_dim0", FWD(cat({x[0], x[1]}, 0)), {U({2, 3}), U({4, 3})}).exact());
  r.push_back(row("cat_dim1_transposed", FWD(cat({x[0], x[1], x[2]}, 1)),
                  {U({3, 4}), U({2, 3}).view(transposed), U({3, 1})}).exact());
  r.push_back(row("stack", FWD(stack({x[0], x[1]}, 1)), {U({3, 4}), U({3, 4})}).exact());
  r.push_back(row("transpose_contiguous", FWD(x[0].transpose(0, 2).contiguous()), {U({2, 3, 4})}).exact());
  r.push_back(row("permute_reshape", FWD(x[0].permute({1, 0, 2}).reshape({3, 8})), {U({2, 3, 4})}).exact());
  r.push_back(row("view_flatten", FWD(mul(x[0].view({6, 4}).flatten(), 2.0)), {U({2, 3, 4})}).exact());
  r.push_back(row("narrow_select", FWD(x[0].narrow(1, 1, 2).select(0, 1)), {U({3, 4, 2})}).exact());
  r.push_back(row("slice_step_squeeze", FWD(x[0].slice(0, 0, 5, 2).unsqueeze(1).squeeze(1).clone()),
                  {U({5, 3})}).exact());
  r.push_back(row("expand_clone", FWD(x[0].expand({3, 4, 5}).clone()), {U({4, 1})}).exact());
});

}  // namespace
}  // namespace volt::optable
