#pragma once
/// @file
/// GPT-2 (Radford et al. 2019) as a library model: token and learned position embeddings, n_layer pre-norm
/// blocks (LayerNorm -> causal self-attention -> residual, LayerNorm -> MLP with tanh GELU -> residual), a final
/// LayerNorm and a language-model head tied to the token embedding.
///
/// @code
///   volt::nn::GPT2 model(volt::nn::gpt2_config("124M"));   // vocabulary padded to 50304
///   model.load("init.safetensors");                         // a PyTorch state_dict under the same names
///   Tensor loss = model.loss(idx, targets);                 // idx, targets (B, T) integer tokens
/// @endcode
///
/// Parameter names are those of the common PyTorch GPT-2 layout (../shared/anchors/gpt2_torch.py), so a state
/// dict written there loads here and the other way round:
/// @code{.unparsed}
///   transformer.wte.weight (V, C)             transformer.wpe.weight (block_size, C)
///   transformer.h.N.ln_1.{weight,bias} (C)    transformer.h.N.attn.c_attn.{weight (3C, C), bias (3C)}
///   transformer.h.N.attn.c_proj.{weight (C, C), bias (C)}
///   transformer.h.N.ln_2.{weight,bias} (C)    transformer.h.N.mlp.c_fc.{weight (4C, C), bias (4C)}
///   transformer.h.N.mlp.c_proj.{weight (C, 4C), bias (C)}
///   transformer.ln_f.{weight,bias} (C)
/// @endcode
/// Linear weights are (out, in) as in torch.nn.Linear. The head has no tensor of its own: logits are
/// ln_f(x) @ wte.weight^T, so the model's state_dict() has no "lm_head.weight" (a file that has one, as a
/// PyTorch state_dict does, loads when that tensor equals transformer.wte.weight).
///
/// Init (GPT-2's): Linear and Embedding weights ~ N(0, 0.02), the residual projections (attn.c_proj and
/// mlp.c_proj weights) ~ N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1 and bias 0.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <volt/nn/layers/embedding.h>
#include <volt/nn/layers/layernorm.h>
#include <volt/nn/layers/linear.h>
#include <volt/nn/module.h>
#include <volt/runtime/generator.h>

namespace volt::nn {

struct GPT2Config {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t vocab_size = 50304;  ///< rows of wte and columns of the logits (GPT-2's 50257 padded to 50304)
  int64_t block_size = 1024;   ///< rows of wpe: the longest sequence
  double ln_eps = 1e-5;

  /// Throws volt::Error naming the field when a size is not positive or n_head does not divide n_embd.
  void validate() const;
  /// "L=12 H=12 C=768 V=50304 T=1024".
  std::string str() const;
};

/// The published sizes by name: "tiny" (2 layers, 2 heads, 64 wide, for tests), "124M" (12, 12, 768), "350M"
/// (24, 16, 1024), "774M" (36, 20, 1280); the vocabulary and block size as given. Any other name is a
/// volt::Error listing these.
GPT2Config gpt2_config(const std::string& name, int64_t vocab_size = 50304, int64_t block_size = 1024);
/// The names gpt2_config knows, in size order.
std::vector<std::string> gpt2_config_names();
/// `vocab` rounded up to a multiple of `multiple` (50257 -> 50304 for 128): tensor-core friendly sizes.
int64_t padded_vocab_size(int64_t vocab, int64_t multiple = 128);

/// Causal multi-head self-attention: (B, T, C) -> (B, T, C). One projection c_attn to q, k, v (stacked along the
/// output rows in that order), causal_self_attention_packed (kernels/attention_packed.h: scaled_dot_product_attention
/// with is_causal per head, reading the heads in place from the projection), then c_proj.
class GPT2Attention : public UnaryModule {
 public:
  GPT2Attention(int64_t n_embd, int64_t n_head);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GPT2Attention"; }
  std::string extra_repr() const override;

  int64_t n_embd, n_head;
  Linear c_attn;  ///< C -> 3C
  Linear c_proj;  ///< C -> C
};

/// c_fc (C -> 4C) with tanh-approximated GELU fused into the linear op, then c_proj (4C -> C).
class GPT2MLP : public UnaryModule {
 public:
  explicit GPT2MLP(int64_t n_embd);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GPT2MLP"; }

  Linear c_fc;
  Linear c_proj;
};

/// x + attn(ln_1(x)), then + mlp(ln_2(.)): (B, T, C) -> (B, T, C).
class GPT2Block : public UnaryModule {
 public:
  GPT2Block(int64_t n_embd, int64_t n_head, double ln_eps);
  Tensor forward(const Tensor& x) override;
  /// The block on a residual stream carried as two terms: its input is x + m, where m (the previous block's MLP
  /// output; undefined: none) is added by the fused residual norm that computes ln_1 (kernels/fused_ops.h), so
  /// the add and, under autocast, m's casts to and from f32 take no passes of their own. Returns (r, mlp(ln_2(r)))
  /// with r = x + m + attn(ln_1(x + m)): their sum is forward(x + m), which passes it on as one tensor.
  /// GPT2::forward chains the blocks this way (each called through Module::call_scoped, so call hooks run).
  std::pair<Tensor, Tensor> forward_pending(const Tensor& x, const Tensor& m);
  std::string type_name() const override { return "GPT2Block"; }

  LayerNorm ln_1;
  GPT2Attention attn;
  LayerNorm ln_2;
  GPT2MLP mlp;
};

/// The trunk, registered as "transformer": wte, wpe, h.0 ... h.{L-1}, ln_f.
class GPT2Transformer : public Module {
 public:
  explicit GPT2Transformer(const GPT2Config& config);
  std::string type_name() const override { return "GPT2Transformer"; }

  Embedding wte;  ///< (V, C), also the head
  Embedding wpe;  ///< (block_size, C)
  Module h;       ///< children "0" ... "L-1"
  std::vector<std::shared_ptr<GPT2Block>> blocks;
  LayerNorm ln_f;
};

class GPT2 : public Module {
 public:
  /// Builds and initialises the model (GPT-2's init, drawn from `gen` or the global generator).
  explicit GPT2(const GPT2Config& config, Generator* gen = nullptr);
  /// idx (B, T) i64 or i32 with 0 < T <= block_size and every token in [0, vocab_size) -> logits (B, T, V).
  Tensor forward(const Tensor& idx);
  /// Mean cross-entropy of forward(idx)'s logits against targets (B, T) i64 over all B*T positions, computed in
  /// fp32, without the (B, T, V) logits: linear_cross_entropy (kernels/fused_ops.h) takes the head and the loss
  /// over chunks of rows of at most 1 GiB of logits and forms the head's and ln_f's output gradients in the
  /// forward. A 0-d tensor, f32 for f16/bf16 compute. Backpropagate it once.
  Tensor loss(const Tensor& idx, const Tensor& targets);
  /// Re-draws every parameter with GPT-2's init (see the file comment).
  void reset_parameters(Generator* gen = nullptr);

  /// Writes state_dict() as safetensors (the file comment's names) with the configuration in the metadata
  /// ("n_layer", "n_head", "n_embd", "vocab_size", "block_size").
  void save(const std::string& path) const;
  /// Loads a safetensors file with exactly this model's tensors (strict; "lm_head.weight" may also be present
  /// and must then equal transformer.wte.weight). Throws volt::Error naming the file and every missing,
  /// unexpected or mis-shaped tensor; nothing is changed when it throws.
  void load(const std::string& path);

  /// The parameters AdamW should decay (every tensor of 2 or more dims: Linear and Embedding weights) and the
  /// rest (biases, LayerNorm weights), in named_parameters() order.
  std::vector<Tensor> decay_parameters() const;
  std::vector<Tensor> no_decay_parameters() const;

  /// Model FLOPs per trained token, forward and backward: 6 N + 6 L C T (N = num_parameters(), T = seq_len),
  /// the count the reference script's MFU uses.
  double flops_per_token(int64_t seq_len) const;

  std::string type_name() const override { return "GPT2"; }
  std::string extra_repr() const override { return config.str(); }

  const GPT2Config config;
  GPT2Transformer transformer;

 private:
  /// ln_f's output (B, T, C) for idx, in the matmul dtype under autocast (forward's checks included).
  Tensor hidden(const Tensor& idx);
};

}  // namespace volt::nn
