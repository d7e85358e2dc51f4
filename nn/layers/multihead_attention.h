#pragma once
#include <utility>

#include <volt/nn/layers/linear.h>
#include <volt/nn/module.h>

namespace volt::nn {

/// Multi-head attention (PyTorch's nn.MultiheadAttention, with kdim = vdim = embed_dim): query, key and value are
/// projected by in_proj, split into num_heads heads of embed_dim / num_heads, attended with
/// scaled_dot_product_attention (kernels/ops.h), concatenated and projected by out_proj.
///
/// Shapes (E = embed_dim): query (L, N, E), key and value (S, N, E) -> (L, N, E); with batch_first (N, L, E),
/// (N, S, E) -> (N, L, E); unbatched (L, E), (S, E) -> (L, E).
/// Parameters under PyTorch's state_dict names, so checkpoints load into torch.nn.MultiheadAttention:
/// @code
///   in_proj_weight (3E, E): the q, k and v projections stacked by rows, xavier_uniform;
///   in_proj_bias (3E), zeros; out_proj.weight (E, E) (Linear's init) and out_proj.bias (E), zeros.
/// @endcode
/// bias = false drops in_proj_bias and out_proj.bias.
///
/// Masks follow PyTorch's MultiheadAttention, whose bool convention is the OPPOSITE of
/// scaled_dot_product_attention's (there true = attend):
/// @code{.unparsed}
///   key_padding_mask (N, S), or (S) unbatched: bool true = that key is padding and is ignored; floating: added to
///     the scores of that key.
///   attn_mask (L, S) or (N * num_heads, L, S) ((num_heads, L, S) unbatched): bool true = query i may NOT attend
///     to key j; floating: added to the scores.
///   is_causal: query i attends only to keys j <= i. Unlike PyTorch (where it is a hint that attn_mask is causal)
///     it is applied, with or without attn_mask.
/// @endcode
/// A query with every key masked gets a zero attention output (PyTorch gives NaN). Dropout (probability
/// `dropout`) applies to the attention weights in training only.
/// forward returns {output, weights}: with need_weights the attention weights (after dropout), averaged over the
/// heads (N, L, S) when average_attn_weights, else per head (N, num_heads, L, S) (no N when unbatched); without
/// need_weights an undefined tensor.
/// As a UnaryModule (so it fits in Sequential / Residual), module(x) is self-attention without masks and returns
/// the output only.
class MultiheadAttention : public UnaryModule {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);
  using UnaryModule::operator();
  std::pair<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                       const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                       bool is_causal = false) {
    return call_scoped([&] {
      return forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal);
    });
  }
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                    bool is_causal = false);
  Tensor forward(const Tensor& x) override;  ///< self-attention, no masks, no weights
  void reset_parameters();
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  int64_t embed_dim, num_heads, head_dim;
  double dropout;
  bool batch_first;
  Tensor in_proj_weight;  ///< (3E, E)
  Tensor in_proj_bias;    ///< (3E), undefined without bias
  Linear out_proj;        ///< E -> E
};

}  // namespace volt::nn
