#pragma once
#include <volt/nn/layers/activation.h>
#include <volt/nn/layers/layernorm.h>
#include <volt/nn/layers/linear.h>
#include <volt/nn/layers/multihead_attention.h>

namespace volt::nn {

enum class TransformerActivation { ReLU, GELU };

/// One transformer encoder block (PyTorch's nn.TransformerEncoderLayer): self-attention and a feed-forward block
/// (linear1 -> activation -> dropout -> linear2), each with dropout, a residual connection and a LayerNorm:
/// @code{.unparsed}
///   norm_first = false (post-norm): x = norm1(x + sa(x)); x = norm2(x + ff(x))
///   norm_first = true  (pre-norm):  x = x + sa(norm1(x)); x = x + ff(norm2(x))
/// @endcode
/// src (L, N, d_model), or (N, L, d_model) with batch_first, or unbatched (L, d_model) -> the same shape.
/// Masks as in MultiheadAttention (PyTorch's convention: bool true = masked out): src_mask (L, S) or
/// (N * nhead, L, S), src_key_padding_mask (N, S); is_causal applies the causal mask (query i sees keys <= i).
/// Submodules and parameters carry PyTorch's names (self_attn.in_proj_weight, self_attn.out_proj.weight,
/// linear1.weight, linear2.weight, norm1.weight, norm2.bias, ...) in PyTorch's order, so a state_dict loads into
/// torch.nn.TransformerEncoderLayer with the same arguments.
/// As a UnaryModule, layer(x) runs without masks.
class TransformerEncoderLayer : public UnaryModule {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          TransformerActivation activation = TransformerActivation::ReLU, double layer_norm_eps = 1e-5,
                          bool batch_first = false, bool norm_first = false, bool bias = true);
  using UnaryModule::operator();
  Tensor operator()(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor(),
                    bool is_causal = false) {
    return call_scoped([&] { return forward(src, src_mask, src_key_padding_mask, is_causal); });
  }
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  std::string extra_repr() const override;

  MultiheadAttention self_attn;
  Linear linear1;  ///< d_model -> dim_feedforward
  Dropout dropout;
  Linear linear2;  ///< dim_feedforward -> d_model
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;
  TransformerActivation activation;
  bool norm_first;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask, bool is_causal);
  Tensor ff_block(const Tensor& x);
};

}  // namespace volt::nn
