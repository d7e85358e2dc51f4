// nn::GPT2: configurations, shapes, parameter names, the tied head, init, causality, gradients against finite
// differences (f64), and safetensors save/load under the reference script's names.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "common/gradcheck.h"
#include <volt/kernels/common/kernel_paths.h>
#include <volt/kernels/fused_ops.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/autocast.h>
#include <volt/nn/models/gpt2.h>
#include <volt/nn/nn.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

nn::GPT2Config small_config() {
  return {.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 11, .block_size = 5};
}

Tensor tokens(const std::vector<int64_t>& v, int64_t B, int64_t T) { return from_vector<int64_t>(v, {B, T}); }

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("volt_gpt2_" + std::to_string(::getpid()) + "_" + name)).string();
}

// std of all elements.
double stddev(const Tensor& t) { return std::sqrt(var(t.to(DType::f64)).item()); }

}  // namespace

TEST(GPT2Config, NamedSizes) {
  EXPECT_EQ(nn::gpt2_config_names(), (std::vector<std::string>{"tiny", "124M", "350M", "774M"}));
  const auto c = nn::gpt2_config("124M");
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.vocab_size, 50304);
  EXPECT_EQ(c.block_size, 1024);
  const auto m = nn::gpt2_config("350M");
  EXPECT_EQ(m.n_layer * 1000000 + m.n_head * 10000 + m.n_embd, 24 * 1000000 + 16 * 10000 + 1024);
  const auto l = nn::gpt2_config("774M");
  EXPECT_EQ(l.n_layer * 1000000 + l.n_head * 10000 + l.n_embd, 36 * 1000000 + 20 * 10000 + 1280);
  const auto t = nn::gpt2_config("tiny", 256, 64);
  EXPECT_EQ(t.n_layer * 1000000 + t.n_head * 10000 + t.n_embd, 2 * 1000000 + 2 * 10000 + 64);
  EXPECT_EQ(t.vocab_size, 256);
  EXPECT_EQ(t.block_size, 64);
  EXPECT_EQ(nn::padded_vocab_size(50257), 50304);
  EXPECT_EQ(nn::padded_vocab_size(256), 256);
  EXPECT_EQ(nn::padded_vocab_size(257, 64), 320);
}

TEST(GPT2Config, Errors) {
  VOLT_EXPECT_ERROR(nn::gpt2_config("125M"), "unknown model '125M'", "tiny, 124M, 350M, 774M");
  nn::GPT2Config c = small_config();
  c.n_head = 3;
  VOLT_EXPECT_ERROR(c.validate(), "n_embd must be a positive multiple of n_head (3), got 8");
  c = small_config();
  c.vocab_size = 0;
  VOLT_EXPECT_ERROR(nn::GPT2 m(c), "vocab_size must be positive, got 0");
  VOLT_EXPECT_ERROR(nn::gpt2_config("tiny", 256, 0), "block_size must be positive, got 0");
}

// The state_dict names, in order, are those of the PyTorch reference (no lm_head: it is tied to wte).
TEST(GPT2, ParameterNamesAndShapes) {
  nn::GPT2 m(small_config());
  std::vector<std::pair<std::string, Shape>> expected = {{"transformer.wte.weight", {11, 8}},
                                                         {"transformer.wpe.weight", {5, 8}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    for (auto [n, s] : std::vector<std::pair<std::string, Shape>>{{"ln_1.weight", {8}},
                                                                  {"ln_1.bias", {8}},
                                                                  {"attn.c_attn.weight", {24, 8}},
                                                                  {"attn.c_attn.bias", {24}},
                                                                  {"attn.c_proj.weight", {8, 8}},
                                                                  {"attn.c_proj.bias", {8}},
                                                                  {"ln_2.weight", {8}},
                                                                  {"ln_2.bias", {8}},
                                                                  {"mlp.c_fc.weight", {32, 8}},
                                                                  {"mlp.c_fc.bias", {32}},
                                                                  {"mlp.c_proj.weight", {8, 32}},
                                                                  {"mlp.c_proj.bias", {8}}})
      expected.emplace_back(p + n, s);
  }
  expected.emplace_back("transformer.ln_f.weight", Shape{8});
  expected.emplace_back("transformer.ln_f.bias", Shape{8});
  const auto sd = m.state_dict();
  ASSERT_EQ(sd.size(), expected.size());
  int64_t total = 0;
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(sd[i].first, expected[i].first);
    EXPECT_EQ(sd[i].second.shape(), expected[i].second) << sd[i].first;
    total += sd[i].second.numel();
  }
  EXPECT_EQ(m.num_parameters(), total);
  // 12 C^2 + 13 C per block, (V + T) C for the embeddings, 2 C for ln_f.
  EXPECT_EQ(total, 2 * (12 * 64 + 13 * 8) + (11 + 5) * 8 + 2 * 8);
  EXPECT_DOUBLE_EQ(m.flops_per_token(5), 6.0 * static_cast<double>(total) + 6.0 * 2 * 8 * 5);
}

TEST(GPT2, ForwardShapeAndLoss) {
  manual_seed(3);
  nn::GPT2 m(small_config());
  Tensor idx = tokens({1, 2, 3, 4, 5, 10, 0, 7}, 2, 4);
  Tensor logits = m.forward(idx);
  EXPECT_EQ(logits.shape(), (Shape{2, 4, 11}));
  EXPECT_EQ(logits.dtype(), DType::f32);
  Tensor tgt = tokens({2, 3, 4, 5, 0, 7, 1, 9}, 2, 4);
  const double loss = m.loss(idx, tgt).item();
  EXPECT_NEAR(loss, cross_entropy(logits.reshape({8, 11}), tgt.reshape({8})).item(), 1e-6);
  // At GPT-2's init the logits are small: the loss is close to log(V).
  EXPECT_NEAR(loss, std::log(11.0), 0.2);
  // i32 tokens give the same logits.
  EXPECT_EQ(max(abs(sub(m.forward(idx.to(DType::i32)), logits))).item(), 0.0);
}

// bf16 logits go to the classifier as they are (no f32 copy): the loss is f32, and every parameter's gradient is bit
// for bit what the composition gives (logits cast to f32, fused_cross_entropy, the gradient cast back to bf16 by the
// cast's backward). GPT2::loss's linear_cross_entropy writes each chunk's logit gradient before the mean's 1 / 8
// and accumulates the head's weight gradient in f32; with 8 rows that factor is a power of two, exact in any
// rounding, and one chunk's f32 sum is the product's own, so nothing differs.
TEST(GPT2, Bf16LogitsNeedNoF32Copy) {
  manual_seed(5);
  nn::GPT2 m(small_config());
  m.to(DType::bf16);
  Tensor idx = tokens({1, 2, 3, 4, 5, 10, 0, 7}, 2, 4);
  Tensor tgt = tokens({2, 3, 4, 5, 0, 7, 1, 9}, 2, 4);
  Tensor loss = m.loss(idx, tgt);
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : m.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), DType::bf16);
    grads.push_back(p.grad().clone());
  }
  m.zero_grad();
  Tensor logits = m.forward(idx);
  Tensor ref = fused_cross_entropy(logits.to(DType::f32).reshape({-1, 11}), tgt.reshape({-1}), {.grad_in_logits = true});
  {
    NoGradGuard ng;
    EXPECT_NEAR(loss.item(), cross_entropy(m.forward(idx).to(DType::f64).reshape({8, 11}), tgt.reshape({8})).item(),
                1e-5);
  }
  EXPECT_EQ(loss.item(), ref.item());
  ref.backward();
  const std::vector<Tensor> params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(max(abs(sub(params[i].grad().to(DType::f64), grads[i].to(DType::f64)))).item(), 0.0) << "param " << i;
}

TEST(GPT2, ForwardErrors) {
  nn::GPT2 m(small_config());
  VOLT_EXPECT_ERROR(m.forward(zeros({1, 6}, DType::i64)), "sequence length 6", "block_size = 5");
  VOLT_EXPECT_ERROR(m.forward(zeros({4}, DType::i64)), "idx must be (B, T) i64 or i32 tokens, got (4,)");
  VOLT_EXPECT_ERROR(m.forward(zeros({1, 2}, DType::f32)), "idx must be (B, T) i64 or i32");
  VOLT_EXPECT_ERROR(m.forward(full({1, 2}, 11, DType::i64)), "11");
  VOLT_EXPECT_ERROR(m.loss(zeros({1, 2}, DType::i64), zeros({1, 3}, DType::i64)), "targets must have the shape");
}

// Position t's logits depend on tokens 0..t only.
TEST(GPT2, Causal) {
  manual_seed(5);
  nn::GPT2 m(small_config());
  Tensor a = m.forward(tokens({1, 2, 3, 4, 5}, 1, 5));
  Tensor b = m.forward(tokens({1, 2, 3, 9, 0}, 1, 5));
  EXPECT_EQ(max(abs(sub(a.narrow(1, 0, 3), b.narrow(1, 0, 3)))).item(), 0.0);
  EXPECT_GT(max(abs(sub(a.narrow(1, 3, 2), b.narrow(1, 3, 2)))).item(), 1e-4);
  // A shorter sequence gives the same logits at the positions it has.
  Tensor c = m.forward(tokens({1, 2, 3}, 1, 3));
  EXPECT_LT(max(abs(sub(a.narrow(1, 0, 3), c))).item(), 1e-6);
}

// The head is wte: logits = ln_f(h) @ wte^T, and the rows of wte for tokens absent from the input still get a
// gradient (from the head).
TEST(GPT2, TiedHead) {
  manual_seed(7);
  nn::GPT2 m(small_config());
  for (const auto& [name, p] : m.named_parameters()) EXPECT_EQ(name.find("lm_head"), std::string::npos) << name;
  Tensor idx = tokens({1, 2, 3}, 1, 3);
  m.loss(idx, tokens({2, 3, 4}, 1, 3)).backward();
  Tensor g = m.transformer.wte.weight.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_GT(max(abs(g.select(0, 10))).item(), 0.0);  // token 10 is never an input
  // Changing wte's row 10 changes the logit of token 10 (and, with no input 10, nothing else's). (Not by a
  // constant: ln_f's output has zero mean over C, so a constant shift of the row would leave the logit as it is.)
  Tensor before = m.forward(idx);
  {
    NoGradGuard ng;
    Tensor row = m.transformer.wte.weight.select(0, 10);
    add_(row, arange(8, DType::f32), 0.5);
  }
  Tensor after = m.forward(idx);
  EXPECT_GT(max(abs(sub(after.select(2, 10), before.select(2, 10)))).item(), 1e-3);
  EXPECT_EQ(max(abs(sub(after.narrow(2, 0, 10), before.narrow(2, 0, 10)))).item(), 0.0);
}

TEST(GPT2, Init) {
  manual_seed(11);
  nn::GPT2Config c = nn::gpt2_config("tiny", 256, 64);
  nn::GPT2 m(c);
  EXPECT_NEAR(stddev(m.transformer.wte.weight), 0.02, 0.001);
  EXPECT_NEAR(stddev(m.transformer.wpe.weight), 0.02, 0.001);
  const double proj = 0.02 / std::sqrt(4.0);
  for (auto& b : m.transformer.blocks) {
    EXPECT_NEAR(stddev(b->attn.c_attn.weight), 0.02, 0.001);
    EXPECT_NEAR(stddev(b->mlp.c_fc.weight), 0.02, 0.001);
    EXPECT_NEAR(stddev(b->attn.c_proj.weight), proj, 0.001);
    EXPECT_NEAR(stddev(b->mlp.c_proj.weight), proj, 0.001);
    for (const Tensor& bias : {b->attn.c_attn.bias, b->attn.c_proj.bias, b->mlp.c_fc.bias, b->mlp.c_proj.bias})
      EXPECT_EQ(max(abs(bias)).item(), 0.0);
    EXPECT_EQ(min(b->ln_1.weight).item(), 1.0);
    EXPECT_EQ(max(b->ln_2.weight).item(), 1.0);
  }
  // The same seed gives the same weights; a Generator overrides the global one.
  manual_seed(11);
  nn::GPT2 again(c);
  EXPECT_EQ(max(abs(sub(again.transformer.wte.weight, m.transformer.wte.weight))).item(), 0.0);
  Generator g(11);
  nn::GPT2 other(c, &g);
  Generator g2(11);
  nn::GPT2 other2(c, &g2);
  EXPECT_EQ(max(abs(sub(other.transformer.wpe.weight, other2.transformer.wpe.weight))).item(), 0.0);
}

TEST(GPT2, DecayGroups) {
  nn::GPT2 m(small_config());
  const auto decay = m.decay_parameters();
  const auto no_decay = m.no_decay_parameters();
  EXPECT_EQ(decay.size(), 2u + 2u * 4u);       // wte, wpe, four Linear weights per block
  EXPECT_EQ(no_decay.size(), 2u * 8u + 2u);    // four biases and four LayerNorm tensors per block, ln_f
  for (const Tensor& t : decay) EXPECT_EQ(t.dim(), 2);
  for (const Tensor& t : no_decay) EXPECT_EQ(t.dim(), 1);
}

// Every parameter's gradient, including the tied wte (embedding + head), against central differences in f64.
TEST(GPT2, GradientsMatchFiniteDifferences) {
  manual_seed(13);
  nn::GPT2 m(small_config());
  m.to(DType::f64);
  {  // larger weights than GPT-2's init, so that every path (attention, GELU, LayerNorm) carries signal
    NoGradGuard ng;
    Generator g(99);
    for (Tensor p : m.parameters()) p.copy_(rand(p.shape(), DType::f64, kCPU, &g, -0.5, 0.5));
  }
  Tensor idx = tokens({1, 2, 3, 4, 5, 10, 0, 7}, 2, 4);
  Tensor tgt = tokens({2, 3, 4, 5, 0, 7, 1, 9}, 2, 4);
  volt::testing::expect_param_gradients_match([&] { return m.loss(idx, tgt); }, m.parameters(), 1e-6, 1e-7, 1e-5);
}

TEST(GPT2, SaveLoadRoundTrip) {
  const std::string path = temp_file("roundtrip.safetensors");
  manual_seed(17);
  nn::GPT2 a(small_config());
  a.save(path);
  std::map<std::string, std::string> meta;
  const auto sd = nn::load_safetensors(path, &meta);
  EXPECT_EQ(sd.size(), a.state_dict().size());
  EXPECT_EQ(meta["n_layer"], "2");
  EXPECT_EQ(meta["n_head"], "2");
  EXPECT_EQ(meta["n_embd"], "8");
  EXPECT_EQ(meta["vocab_size"], "11");
  EXPECT_EQ(meta["block_size"], "5");
  manual_seed(18);
  nn::GPT2 b(small_config());
  Tensor idx = tokens({1, 2, 3, 4}, 1, 4);
  EXPECT_GT(max(abs(sub(a.forward(idx), b.forward(idx)))).item(), 1e-4);
  b.load(path);
  EXPECT_EQ(max(abs(sub(a.forward(idx), b.forward(idx)))).item(), 0.0);
  fs::remove(path);
}

// A PyTorch state_dict keeps lm_head.weight (the same tensor as wte): it loads when equal and is refused when not.
TEST(GPT2, LoadWithHeadAndErrors) {
  const std::string path = temp_file("head.safetensors");
  manual_seed(19);
  nn::GPT2 a(small_config());
  nn::StateDict sd = a.state_dict();
  sd.emplace_back("lm_head.weight", a.transformer.wte.weight.detach());
  nn::save_safetensors(path, sd);
  nn::GPT2 b(small_config());
  b.load(path);
  EXPECT_EQ(max(abs(sub(b.transformer.wte.weight, a.transformer.wte.weight))).item(), 0.0);

  sd.back().second = add(a.transformer.wte.weight.detach(), 1.0);
  nn::save_safetensors(path, sd);
  VOLT_EXPECT_ERROR(b.load(path), path.c_str(), "lm_head.weight differs from transformer.wte.weight");

  sd.pop_back();
  sd.erase(sd.begin() + 1);  // no wpe
  nn::save_safetensors(path, sd);
  VOLT_EXPECT_ERROR(b.load(path), path.c_str(), "transformer.wpe.weight");

  nn::GPT2Config wider = small_config();
  wider.block_size = 6;
  nn::GPT2 c(wider);
  c.save(path);
  const Tensor before = b.transformer.wte.weight.clone();
  VOLT_EXPECT_ERROR(b.load(path), path.c_str(), "transformer.wpe.weight");
  EXPECT_EQ(max(abs(sub(b.transformer.wte.weight, before))).item(), 0.0);  // nothing copied
  VOLT_EXPECT_ERROR(b.load(temp_file("missing.safetensors")), "missing.safetensors");
  fs::remove(path);
}

// What a block keeps for the backward under bf16 autocast, measured by the CPU allocator: the difference between
// a 2- and a 1-block model's live bytes after the loss's forward. Per token and channel, in bytes: the block's input
// (f32 residual stream, 4), ln_1's and ln_2's bf16 outputs (2 + 2, kept by c_attn and c_fc), q, k and v (bf16, 6),
// the attention output (bf16, 2, kept by c_proj), s = x + attn (f32, 4, kept by ln_2) and c_fc's pre-activation
// (bf16, 8; fused_mlp recomputes the GELU output from it, which the two layers would keep: 8 more): 28. The attention
// keeps no probabilities: Volt's path runs in chunks of query rows and recomputes them in the backward (cuDNN's
// flash attention keeps only row statistics); with VOLT_DISABLE_KERNELS=chunked_attention it keeps them (f32 here,
// 4 H T / C). Per block also the bf16 weight copies (2 x 12 C^2) and a little per token
// (norm statistics) and per channel (bias copies). An f32 copy of an activation kept by mistake adds 4 (the
// autocast copy of the attention's output residual_layer_norm once kept did).
TEST(GPT2, ActivationBytesPerBlockUnderAutocastStayWithinBudget) {
  const int64_t B = 4, T = 32, C = 64, H = 4;
  auto held = [&](int64_t layers) {
    manual_seed(6);
    nn::GPT2 m({.n_layer = layers, .n_head = H, .n_embd = C, .vocab_size = 128, .block_size = T});
    Tensor idx = mul(rand({B, T}), 127.0).to(DType::i64), tgt = mul(rand({B, T}), 127.0).to(DType::i64);
    const int64_t before = memory_stats(kCPU).allocated;
    AutocastGuard ac(true, DType::bf16);
    Tensor loss = m.loss(idx, tgt);
    return memory_stats(kCPU).allocated - before;
  };
  const int64_t per_block = held(2) - held(1), N = B * T, weights = 2 * 12 * C * C;
  const double per_nc = double(per_block - weights) / double(N * C);
  const bool whole_weights = kernel_paths::disabled(kernel_paths::kChunkedAttention);
  const double budget = 28.0 + (whole_weights ? 4.0 * double(H * T) / double(C) : 0.0);
  std::printf("GPT-2 block under bf16 autocast: %lld bytes, %.3f per token-channel besides the %lld of weight "
              "copies (budget %.1f + 1)\n",
              static_cast<long long>(per_block), per_nc, static_cast<long long>(weights), budget);
  EXPECT_GE(per_nc, budget);
  EXPECT_LE(per_nc, budget + 1.0);
}
