// Op table rows (see op_table.h): the layer ops of kernels/layer_ops.h (conv1d, conv_transpose2d, interpolate,
// adaptive_avg_pool2d) and the functional losses of nn/losses.h.
#include "kernels/op_table/op_table.h"

#include <volt/kernels/layer_ops.h>
#include <volt/nn/losses.h>

namespace volt::optable {
namespace {

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // ---- convolution -------------------------------------------------------------------------------------------
  r.push_back(row("conv1d_stride_pad_dilation_groups", FWD(conv1d(x[0], x[1], x[2], 2, 1, 2, 2)),
                  {U({2, 4, 9}), U({6, 2, 3}), U({6})})
                  .tol(3)
                  .gradcheck_tol(1e-5, 1e-5));
  r.push_back(row("conv1d_unbatched_nobias", FWD(conv1d(x[0], x[1])), {U({3, 7}), U({2, 3, 2})})
                  .tol(3));
  r.push_back(row("conv_transpose2d_stride_outpad", FWD(conv_transpose2d(x[0], x[1], x[2], {2, 2}, {1, 1}, {1, 1})),
                  {U({2, 3, 4, 4}), U({3, 2, 3, 3}), U({2})})
                  .tol(3)
                  .gradcheck_tol(1e-5, 1e-5));
  // output_padding at the stride (allowed by dilation 2): the zero-padded path; groups split the channels.
  r.push_back(row("conv_transpose2d_groups_dilation",
                  FWD(conv_transpose2d(x[0], x[1], x[2], {1, 2}, {1, 0}, {1, 1}, 2, {2, 1})),
                  {U({1, 4, 3, 3}), U({4, 2, 2, 3}), U({4})})
                  .tol(3)
                  .gradcheck_tol(1e-5, 1e-5));
  r.push_back(row("conv_transpose2d_transposed_nobias", FWD(conv_transpose2d(x[0], x[1])),
                  {U({3, 2, 4, 4}).view(transposed), U({3, 2, 2, 2})})
                  .tol(3));

  // ---- interpolation and adaptive pooling ----------------------------------------------------------------------
  r.push_back(row("interpolate_nearest_scale", FWD(interpolate(x[0], {.scale_factor = {2.0, 1.5}})),
                  {U({2, 2, 3, 4})}));
  r.push_back(row("interpolate_nearest_size_down", FWD(interpolate(x[0], {.size = {2, 3}})), {U({1, 3, 5, 7})}));
  r.push_back(row("interpolate_bilinear_scale",
                  FWD(interpolate(x[0], {.scale_factor = {1.7}, .mode = InterpolateMode::Bilinear})),
                  {U({2, 2, 3, 4})})
                  .tol(2));
  r.push_back(row("interpolate_bilinear_align_corners",
                  FWD(interpolate(x[0], {.size = {5, 3}, .mode = InterpolateMode::Bilinear, .align_corners = true})),
                  {U({1, 2, 4, 3}).view([](const Tensor& t) { return t.transpose(2, 3); })})
                  .tol(2));
  r.push_back(row("adaptive_avg_pool2d", FWD(adaptive_avg_pool2d(x[0], {3, 4})), {U({2, 3, 7, 5})}).tol(2));
  r.push_back(row("adaptive_avg_pool2d_unbatched_up", FWD(adaptive_avg_pool2d(x[0], {5, 1})), {U({2, 3, 4})})
                  .tol(2));

  // ---- losses (nn/losses.h) -------------------------------------------------------------------------------------
  r.push_back(row("bce_with_logits_weights_none",
                  FWD(nn::binary_cross_entropy_with_logits(x[0], x[1], x[2], Reduction::None, x[3])),
                  {U({4, 3}, -3, 3), U({4, 3}, 0, 1), U({3}, 0.5, 2), U({3}, 0.5, 3)})
                  .tol(3));
  r.push_back(row("bce_with_logits_mean", FWD(nn::binary_cross_entropy_with_logits(x[0], x[1])),
                  {U({5, 4}, -4, 4), U({5, 4}, 0, 1)})
                  .tol(3));
  r.push_back(row("binary_cross_entropy_sum", FWD(nn::binary_cross_entropy(x[0], x[1], x[2], Reduction::Sum)),
                  {U({4, 3}, 0.1, 0.9), U({4, 3}, 0, 1), U({4, 1}, 0.5, 2)})
                  .tol(3));
  r.push_back(row("smooth_l1_loss_none", FWD(nn::smooth_l1_loss(x[0], x[1], Reduction::None, 0.5)),
                  {U({4, 5}, -2, 2), U({4, 5}, -2, 2)})
                  .tol(2));
  r.push_back(row("huber_loss_mean_bcast", FWD(nn::huber_loss(x[0], x[1], Reduction::Mean, 0.8)),
                  {U({4, 5}, -2, 2), U({5}, -2, 2)})
                  .tol(2));
  r.push_back(row("kl_div_batchmean", FWD(nn::kl_div(x[0], x[1], "batchmean")), {U({4, 5}, -3, 0), U({4, 5}, 0.05, 1)})
                  .tol(3));
  r.push_back(row("kl_div_log_target_none", FWD(nn::kl_div(x[0], x[1], "none", true)),
                  {U({4, 5}, -3, 0), U({4, 5}, -3, 0)})
                  .tol(3));
  r.push_back(row("cosine_similarity_bcast", FWD(nn::cosine_similarity(x[0], x[1], -1)), {U({3, 4, 5}), U({4, 5})})
                  .tol(3));
});

}  // namespace
}  // namespace volt::optable
