#include <volt/nn/models/gpt2.h>
#include <volt/nn/models/gpt2_recompute.h>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <volt/kernels/attention_packed.h>
#include <volt/kernels/fused_ops.h>
#include <volt/nn/init.h>
#include <volt/nn/recompute.h>
#include <volt/nn/serialization.h>

namespace volt::nn {

namespace {

struct NamedConfig {
  const char* name;
  int64_t n_layer, n_head, n_embd;
};
constexpr NamedConfig kConfigs[] = {{"tiny", 2, 2, 64}, {"124M", 12, 12, 768}, {"350M", 24, 16, 1024},
                                    {"774M", 36, 20, 1280}};

// The models with recomputation on, by their first block (owner comparison: a model built later at the same
// address is a different owner, so it does not inherit the setting; expired entries are dropped as others change).
std::mutex g_recompute_mu;
std::set<std::weak_ptr<GPT2Block>, std::owner_less<std::weak_ptr<GPT2Block>>> g_recompute;

}  // namespace

void set_recompute(GPT2& model, bool on) {
  std::lock_guard<std::mutex> l(g_recompute_mu);
  std::erase_if(g_recompute, [](const auto& w) { return w.expired(); });
  const std::weak_ptr<GPT2Block> key = model.transformer.blocks.front();
  if (on)
    g_recompute.insert(key);
  else
    g_recompute.erase(key);
}

bool recompute_enabled(const GPT2& model) {
  std::lock_guard<std::mutex> l(g_recompute_mu);
  return g_recompute.count(model.transformer.blocks.front()) > 0;
}

void GPT2Config::validate() const {
  VOLT_CHECK(n_layer > 0, "GPT2Config: n_layer must be positive, got ", n_layer);
  VOLT_CHECK(n_head > 0, "GPT2Config: n_head must be positive, got ", n_head);
  VOLT_CHECK(n_embd > 0 && n_embd % n_head == 0, "GPT2Config: n_embd must be a positive multiple of n_head (",
             n_head, "), got ", n_embd);
  VOLT_CHECK(vocab_size > 0, "GPT2Config: vocab_size must be positive, got ", vocab_size);
  VOLT_CHECK(block_size > 0, "GPT2Config: block_size must be positive, got ", block_size);
  VOLT_CHECK(ln_eps > 0 && std::isfinite(ln_eps), "GPT2Config: ln_eps must be a positive finite number, got ", ln_eps);
}

std::string GPT2Config::str() const {
  std::ostringstream s;
  s << "L=" << n_layer << " H=" << n_head << " C=" << n_embd << " V=" << vocab_size << " T=" << block_size;
  return s.str();
}

GPT2Config gpt2_config(const std::string& name, int64_t vocab_size, int64_t block_size) {
  for (const auto& c : kConfigs)
    if (name == c.name) {
      GPT2Config out{.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = vocab_size,
                     .block_size = block_size};
      out.validate();
      return out;
    }
  std::string known;
  for (const auto& n : gpt2_config_names()) known += (known.empty() ? "" : ", ") + n;
  VOLT_CHECK(false, "gpt2_config: unknown model '", name, "'; expected one of ", known);
  return {};
}

std::vector<std::string> gpt2_config_names() {
  std::vector<std::string> out;
  for (const auto& c : kConfigs) out.emplace_back(c.name);
  return out;
}

int64_t padded_vocab_size(int64_t vocab, int64_t multiple) {
  VOLT_CHECK(vocab > 0 && multiple > 0, "padded_vocab_size: vocab and multiple must be positive, got ", vocab, " and ",
             multiple);
  return (vocab + multiple - 1) / multiple * multiple;
}

GPT2Attention::GPT2Attention(int64_t c, int64_t h) : n_embd(c), n_head(h), c_attn(c, 3 * c), c_proj(c, c) {
  VOLT_CHECK(h > 0 && c % h == 0, "GPT2Attention: n_head (", h, ") must divide n_embd (", c, ")");
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
}

Tensor GPT2Attention::forward(const Tensor& x) {
  VOLT_CHECK(x.dim() == 3 && x.size(2) == n_embd, "GPT2Attention: input must be (B, T, ", n_embd, "), got ",
             x.shape_str());
  // q, k, v heads read in place from the (B, T, 3C) projection; on cuDNN's path no copies forward or backward
  // (kernels/attention_packed.h).
  return c_proj(causal_self_attention_packed(c_attn(x), n_head));  // (B, T, C)
}

std::string GPT2Attention::extra_repr() const {
  return "n_embd=" + std::to_string(n_embd) + ", n_head=" + std::to_string(n_head);
}

GPT2MLP::GPT2MLP(int64_t c) : c_fc(c, 4 * c, LinearOptions{.activation = Activation::GELUTanh}), c_proj(4 * c, c) {
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
}

Tensor GPT2MLP::forward(const Tensor& x) {
  // One op (kernels/fused_ops.h): the GELU output between the layers is recomputed in the backward instead of held
  // ((B, T, 4C) per block). A module with a call hook (an FSDP unit gathers its parameters in it) runs as itself.
  if (c_fc.call_hook() != nullptr || c_proj.call_hook() != nullptr) return c_proj(c_fc(x));
  return fused_mlp(x, c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias, c_fc.activation);
}

GPT2Block::GPT2Block(int64_t c, int64_t h, double eps)
    : ln_1(Shape{c}, eps), attn(c, h), ln_2(Shape{c}, eps), mlp(c) {
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

namespace {
// ln(x) as the input of a matmul (kernels/fused_ops.h): under bf16/f16 autocast it is written in that dtype, which
// the matmul would otherwise cast it to in a pass of its own. Run as a call of ln (its call hook, if any, runs).
Tensor norm_for_matmul(LayerNorm& ln, const Tensor& x) {
  return ln.call_scoped([&] { return layer_norm_for_matmul(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps); });
}
// (x + m, ln(x + m)) in one pass, ln's output as above; with m undefined, (x, ln(x)).
std::pair<Tensor, Tensor> residual_norm_for_matmul(LayerNorm& ln, const Tensor& x, const Tensor& m) {
  if (!m.defined()) return {x, norm_for_matmul(ln, x)};
  return ln.call_scoped([&] { return residual_layer_norm_for_matmul(x, m, ln.weight, ln.bias, ln.eps); });
}
}  // namespace

Tensor GPT2Block::forward(const Tensor& x) {
  auto [r, m] = forward_pending(x, Tensor());
  return add(r, m);
}

std::pair<Tensor, Tensor> GPT2Block::forward_pending(const Tensor& x, const Tensor& m) {
  // Each residual add is fused with the norm after it (kernels/fused_ops.h): x + m with ln_1, then the attention's
  // with ln_2. ln_1 and ln_2 (and ln_f) feed only linear layers, so under autocast their outputs are written in its
  // dtype, and a half m is read as it is.
  auto [x1, h] = residual_norm_for_matmul(ln_1, x, m);
  auto [r, y] = residual_norm_for_matmul(ln_2, x1, attn(h));
  return {r, mlp(y)};
}

GPT2Transformer::GPT2Transformer(const GPT2Config& c)
    : wte((c.validate(), c.vocab_size), c.n_embd), wpe(c.block_size, c.n_embd), ln_f(Shape{c.n_embd}, c.ln_eps) {
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("h", h);
  for (int64_t i = 0; i < c.n_layer; ++i)
    blocks.push_back(h.register_module(std::to_string(i), std::make_shared<GPT2Block>(c.n_embd, c.n_head, c.ln_eps)));
  register_module("ln_f", ln_f);
}

GPT2::GPT2(const GPT2Config& c, Generator* gen) : config(c), transformer(c) {
  register_module("transformer", transformer);
  reset_parameters(gen);
}

void GPT2::reset_parameters(Generator* gen) {
  NoGradGuard ng;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  init::normal_(transformer.wte.weight, 0.0, 0.02, gen);
  init::normal_(transformer.wpe.weight, 0.0, 0.02, gen);
  for (auto& b : transformer.blocks) {
    for (Linear* l : {&b->attn.c_attn, &b->attn.c_proj, &b->mlp.c_fc, &b->mlp.c_proj}) {
      init::normal_(l->weight, 0.0, l == &b->attn.c_proj || l == &b->mlp.c_proj ? proj_std : 0.02, gen);
      l->bias.zero_();
    }
    for (LayerNorm* n : {&b->ln_1, &b->ln_2}) n->reset_parameters();
  }
  transformer.ln_f.reset_parameters();
}

Tensor GPT2::hidden(const Tensor& idx) {
  VOLT_CHECK(idx.defined() && idx.dim() == 2 && (idx.dtype() == DType::i64 || idx.dtype() == DType::i32),
             "GPT2::forward: idx must be (B, T) i64 or i32 tokens, got ",
             idx.defined() ? idx.shape_str() + " " + dtype_name(idx.dtype()) : std::string("undefined"));
  const int64_t T = idx.size(1);
  VOLT_CHECK(T > 0 && T <= config.block_size, "GPT2::forward: sequence length ", T,
             " must be in [1, block_size = ", config.block_size, "]");
  Tensor x = add(transformer.wte(idx), transformer.wpe(arange(T, DType::i64, idx.device())));  // (B, T, C)
  // The residual stream is x + m: each block's MLP output m is added by the next norm (GPT2Block::
  // forward_pending). A recomputed block takes and returns the sum (one tensor kept per block).
  Tensor m;
  const bool recompute = recompute_enabled(*this);
  for (auto& b : transformer.blocks) {
    if (recompute)
      x = nn::recompute(*b, x);
    else
      std::tie(x, m) = b->call_scoped([&] { return b->forward_pending(x, m); });
  }
  return residual_norm_for_matmul(transformer.ln_f, x, m).second;
}

Tensor GPT2::forward(const Tensor& idx) {
  return call_scoped([&] { return linear(hidden(idx), transformer.wte.weight); });  // (B, T, V)
}

Tensor GPT2::loss(const Tensor& idx, const Tensor& targets) {
  VOLT_CHECK(targets.defined() && targets.dim() == 2 && targets.shape() == idx.shape(),
             "GPT2::loss: targets must have the shape of idx ", idx.shape_str(), ", got ",
             targets.defined() ? targets.shape_str() : std::string("undefined"));
  // The tied head and the loss in one op (kernels/fused_ops.h): chunks of rows, each chunk's logits, loss and
  // gradients formed and its logits dropped, so the (B * T, V) logits are never held; the classifier reads half
  // logits as they are and computes in f32. Inside the model's call scope, as forward's head is (FSDP gathers wte).
  return call_scoped([&] {
    const Tensor h = hidden(idx);
    return linear_cross_entropy(h.reshape({-1, config.n_embd}), transformer.wte.weight,
                                targets.reshape({-1}).to(DType::i64), {.f32_loss = true});
  });
}

void GPT2::save(const std::string& path) const {
  const std::map<std::string, std::string> meta = {{"n_layer", std::to_string(config.n_layer)},
                                                   {"n_head", std::to_string(config.n_head)},
                                                   {"n_embd", std::to_string(config.n_embd)},
                                                   {"vocab_size", std::to_string(config.vocab_size)},
                                                   {"block_size", std::to_string(config.block_size)}};
  save_safetensors(path, state_dict(), meta);
}

void GPT2::load(const std::string& path) {
  StateDict sd = load_safetensors(path);
  StateDict kept;
  Tensor head;
  for (auto& [name, t] : sd) {
    if (name == "lm_head.weight")
      head = t;
    else
      kept.emplace_back(name, t);
  }
  try {
    if (head.defined()) {
      Tensor wte;
      for (auto& [name, t] : kept)
        if (name == "transformer.wte.weight") wte = t;
      VOLT_CHECK(wte.defined() && wte.shape() == head.shape() &&
                     max(abs(sub(wte.to(DType::f64), head.to(DType::f64)))).item() == 0.0,
                 "lm_head.weight differs from transformer.wte.weight; GPT2's head is tied to the token embedding");
    }
    load_state_dict(kept, /*strict=*/true);
  } catch (const Error& e) {
    VOLT_CHECK(false, "GPT2::load('", path, "'): ", e.what());
  }
}

std::vector<Tensor> GPT2::decay_parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, p] : named_parameters())
    if (p.dim() >= 2) out.push_back(p);
  return out;
}

std::vector<Tensor> GPT2::no_decay_parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, p] : named_parameters())
    if (p.dim() < 2) out.push_back(p);
  return out;
}

double GPT2::flops_per_token(int64_t seq_len) const {
  return 6.0 * static_cast<double>(num_parameters()) +
         6.0 * static_cast<double>(config.n_layer * config.n_embd * seq_len);
}

}  // namespace volt::nn
