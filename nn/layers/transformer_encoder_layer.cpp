#include <volt/nn/layers/transformer_encoder_layer.h>

#include <sstream>

namespace volt::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double p,
                                                 TransformerActivation act, double layer_norm_eps, bool batch_first,
                                                 bool norm_first_, bool bias)
    : self_attn(d_model, nhead, p, bias, batch_first),
      linear1(d_model, dim_feedforward, bias),
      dropout(p),
      linear2(dim_feedforward, d_model, bias),
      norm1(Shape{d_model}, layer_norm_eps, true, bias),
      norm2(Shape{d_model}, layer_norm_eps, true, bias),
      dropout1(p),
      dropout2(p),
      activation(act),
      norm_first(norm_first_) {
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask,
                                         bool is_causal) {
  return dropout1(self_attn(x, x, x, key_padding_mask, /*need_weights=*/false, mask, true, is_causal).first);
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  Tensor h = linear1(x);
  h = activation == TransformerActivation::GELU ? gelu(h) : relu(h);
  return dropout2(linear2(dropout(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  Tensor x = src;
  if (norm_first) {
    x = add(x, sa_block(norm1(x), src_mask, src_key_padding_mask, is_causal));
    return add(x, ff_block(norm2(x)));
  }
  x = norm1(add(x, sa_block(x, src_mask, src_key_padding_mask, is_causal)));
  return norm2(add(x, ff_block(x)));
}

std::string TransformerEncoderLayer::extra_repr() const {
  std::ostringstream os;
  os << "d_model=" << self_attn.embed_dim << ", nhead=" << self_attn.num_heads
     << ", dim_feedforward=" << linear1.out_features << ", dropout=" << dropout.p
     << ", activation=" << (activation == TransformerActivation::GELU ? "gelu" : "relu")
     << ", norm_first=" << (norm_first ? "true" : "false");
  return os.str();
}

}  // namespace volt::nn
