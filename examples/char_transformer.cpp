// A character-level language model: token and learned position embeddings, TransformerEncoderLayers (pre-norm,
// GELU) under a causal mask, a final LayerNorm and a linear head predicting the next character; trained by the
// Trainer on text shipped with the repository: by default the pinned corpus examples/corpus/licenses.txt (four
// licence texts, ~90 KB; see examples/corpus/README.md), which does not change when the docs do.
// The last 10% of the text is held out: the first half for validation (val_loss), the second for the test
// (test_loss). results.json records the training loss of the first step and the mean over the last 50 steps.
//
//   build/examples/char_transformer --max-steps 300 --accelerator cpu
//   build/examples/char_transformer --text my_book.txt --seq-len 128 --d-model 128 --layers 4 --accelerator gpu
#include <algorithm>
#include <fstream>
#include <sstream>

#include "examples/example_common.h"
#include <volt/nn/functional.h>
#include <volt/nn/nn.h>
#include <volt/nn/optim.h>
#include <volt/trainer/train_module.h>

#ifndef VOLT_SOURCE_DIR
#define VOLT_SOURCE_DIR "."
#endif

namespace {

using namespace volt;

struct CharArgs {
  std::string text = VOLT_SOURCE_DIR "/examples/corpus/licenses.txt";
  int64_t seq_len = 64;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t ff_dim = 256;
  double dropout = 0.1;
  int64_t sample_chars = 200;
};

// The files named in `list` (comma-separated), concatenated.
std::string read_text(const std::string& list) {
  std::string all;
  std::stringstream ss(list);
  std::string path;
  while (std::getline(ss, path, ',')) {
    if (path.empty()) continue;
    std::ifstream f(path, std::ios::binary);
    VOLT_CHECK(f.good(), "--text: cannot read '", path, "' (expected a text file; several may be separated by commas)");
    std::ostringstream body;
    body << f.rdbuf();
    all += body.str();
    if (!all.empty() && all.back() != '\n') all += '\n';
  }
  VOLT_CHECK(!all.empty(), "--text '", list, "': no text read");
  return all;
}

// The characters of a text as a vocabulary (sorted byte values) and the text as i64 token ids.
struct Corpus {
  std::vector<unsigned char> vocab;
  std::vector<int64_t> index_of = std::vector<int64_t>(256, -1);
  Tensor tokens;  // (N) i64

  explicit Corpus(const std::string& text) {
    std::vector<bool> seen(256, false);
    for (unsigned char c : text) seen[c] = true;
    for (int c = 0; c < 256; ++c)
      if (seen[c]) {
        index_of[c] = static_cast<int64_t>(vocab.size());
        vocab.push_back(static_cast<unsigned char>(c));
      }
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = index_of[static_cast<unsigned char>(text[i])];
    tokens = from_vector<int64_t>(ids, {static_cast<int64_t>(ids.size())});
  }
  int64_t size() const { return static_cast<int64_t>(vocab.size()); }
};

// Windows of seq_len tokens of a stretch [begin, end) of the token stream, one every `stride` tokens: input
// tokens[i, i + T), target tokens[i + 1, i + T + 1) (the next character at every position).
class CharWindows : public data::Dataset {
 public:
  CharWindows(Tensor tokens, int64_t begin, int64_t end, int64_t seq_len, int64_t stride)
      : tokens_(std::move(tokens)), begin_(begin), seq_len_(seq_len), stride_(stride) {
    const int64_t span = end - begin - seq_len;  // the last window's target ends at `end`
    count_ = span > 0 ? (span - 1) / stride + 1 : 0;
    VOLT_CHECK(count_ > 0, "char_transformer: a data split of ", end - begin, " characters is too short for --seq-len ",
               seq_len, "; give more text or a shorter --seq-len");
  }
  int64_t size() const override { return count_; }
  data::Batch get(int64_t index) const override {
    VOLT_CHECK(index >= 0 && index < count_, "CharWindows: index ", index, " out of range [0, ", count_, ")");
    const int64_t start = begin_ + index * stride_;
    return {tokens_.narrow(0, start, seq_len_), tokens_.narrow(0, start + 1, seq_len_)};
  }

 private:
  Tensor tokens_;
  int64_t begin_, seq_len_, stride_, count_;
};

// 90% training windows (every position, shuffled), then validation and test windows (non-overlapping) from the
// two halves of the last 10%.
class CharDataModule : public data::DataModule {
 public:
  CharDataModule(Tensor tokens, int64_t seq_len, int64_t batch_size, int num_workers, uint64_t seed)
      : tokens_(std::move(tokens)), seq_len_(seq_len), batch_size_(batch_size), num_workers_(num_workers), seed_(seed) {}
  void setup(const std::string&) override {
    const int64_t n = tokens_.numel(), train_end = n * 9 / 10, val_end = train_end + (n - train_end) / 2;
    train_ = std::make_shared<CharWindows>(tokens_, 0, train_end, seq_len_, 1);
    val_ = std::make_shared<CharWindows>(tokens_, train_end, val_end, seq_len_, seq_len_);
    test_ = std::make_shared<CharWindows>(tokens_, val_end, n, seq_len_, seq_len_);
  }
  std::shared_ptr<data::DataLoader> train_dataloader() override { return loader(train_, true); }
  std::shared_ptr<data::DataLoader> val_dataloader() override { return loader(val_, false); }
  std::shared_ptr<data::DataLoader> test_dataloader() override { return loader(test_, false); }

 private:
  std::shared_ptr<data::DataLoader> loader(const std::shared_ptr<data::Dataset>& ds, bool train) {
    data::DataLoaderOptions o;
    o.batch_size = batch_size_;
    o.shuffle = train;
    o.drop_last = train;
    o.num_workers = num_workers_;
    o.persistent_workers = num_workers_ > 0;
    o.pin_memory = true;
    o.seed = seed_;
    return std::make_shared<data::DataLoader>(ds, o);
  }
  Tensor tokens_;
  int64_t seq_len_, batch_size_;
  int num_workers_;
  uint64_t seed_;
  std::shared_ptr<data::Dataset> train_, val_, test_;
};

struct CharTransformer : TrainModule {
  int64_t vocab, seq_len;
  double lr;
  nn::Embedding tok, pos;
  nn::Sequential layers;  // TransformerEncoderLayers, called one by one with the causal mask
  std::vector<std::shared_ptr<nn::TransformerEncoderLayer>> blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
  std::vector<Tensor> recent_losses;  // detached, on the device: read once at the end
  Tensor first_loss;

  CharTransformer(int64_t vocab_, const CharArgs& c, double lr_)
      : vocab(vocab_), seq_len(c.seq_len), lr(lr_), tok(vocab_, c.d_model), pos(c.seq_len, c.d_model),
        ln_f(c.d_model), head(c.d_model, vocab_) {
    register_module("tok", tok);
    register_module("pos", pos);
    for (int64_t i = 0; i < c.layers; ++i)
      blocks.push_back(layers.push_back(std::make_shared<nn::TransformerEncoderLayer>(
          c.d_model, c.heads, c.ff_dim, c.dropout, nn::TransformerActivation::GELU, 1e-5, /*batch_first=*/true,
          /*norm_first=*/true)));
    register_module("layers", layers);
    register_module("ln_f", ln_f);
    register_module("head", head);
    save_hyperparameters({{"vocab_size", vocab}, {"seq_len", c.seq_len}, {"d_model", c.d_model}, {"heads", c.heads},
                          {"layers", c.layers}, {"ff_dim", c.ff_dim}, {"dropout", c.dropout}, {"learning_rate", lr}});
  }
  std::string type_name() const override { return "CharTransformer"; }

  Tensor forward(const Tensor& x) {  // x (B, T) i64 -> logits (B, T, vocab)
    const int64_t T = x.size(1);
    Tensor h = add(tok(x), pos(arange(T, DType::i64, x.device())));  // (B, T, d)
    for (auto& b : blocks) h = (*b)(h, Tensor(), Tensor(), /*is_causal=*/true);
    return head(ln_f(h));
  }
  Tensor loss_of(const data::Batch& b) {
    return cross_entropy(forward(b.input).reshape({-1, vocab}), b.target.reshape({-1}));
  }
  Tensor training_step(const data::Batch& b, int64_t) override {
    Tensor loss = loss_of(b);
    log("train_loss", loss, {.prog_bar = true});
    if (!first_loss.defined()) first_loss = loss.detach();
    recent_losses.push_back(loss.detach());
    if (recent_losses.size() > 50) recent_losses.erase(recent_losses.begin());
    return loss;
  }
  void validation_step(const data::Batch& b, int64_t) override { log("val_loss", loss_of(b), {.prog_bar = true}); }
  void test_step(const data::Batch& b, int64_t) override { log("test_loss", loss_of(b)); }
  Optimizers configure_optimizers() override { return optim::AdamW(parameters(), {.lr = lr, .weight_decay = 0.01}); }

  // Mean training loss of the last (up to 50) steps; NaN before any step.
  double recent_train_loss() const {
    if (recent_losses.empty()) return std::nan("");
    std::vector<Tensor> l;
    for (const Tensor& t : recent_losses) l.push_back(t.to(DType::f32));
    return mean(stack(l)).item();
  }
};

// Continues `prompt` by sampling `n` characters from the model (temperature 1) with a seeded generator.
std::string sample(CharTransformer& model, const Corpus& corpus, const std::string& prompt, int64_t n, uint64_t seed) {
  NoGradGuard ng;
  model.eval();
  std::vector<int64_t> ids;
  for (unsigned char c : prompt)
    if (corpus.index_of[c] >= 0) ids.push_back(corpus.index_of[c]);
  if (ids.empty()) ids.push_back(0);
  Generator gen(seed);
  std::string out = prompt;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.seq_len);
    std::vector<int64_t> ctx(ids.end() - t, ids.end());
    Tensor x = from_vector<int64_t>(ctx, {1, t}).to(model.device());
    Tensor logits = model.forward(x).select(1, t - 1).to(DType::f32);  // (1, vocab)
    std::vector<double> p = softmax(logits, -1).to_vector<double>();
    const double u = rand({1}, DType::f64, kCPU, &gen).item();
    double acc = 0;
    int64_t next = static_cast<int64_t>(p.size()) - 1;
    for (size_t i = 0; i < p.size(); ++i) {
      acc += p[i];
      if (u < acc) {
        next = static_cast<int64_t>(i);
        break;
      }
    }
    ids.push_back(next);
    out += static_cast<char>(corpus.vocab[static_cast<size_t>(next)]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace volt::examples;
  const std::string name = "char_transformer";
  Args args;
  args.out = "runs/char_transformer";
  args.batch_size = 32;
  args.lr = 3e-3;
  args.epochs = 1000;  // --max-steps ends the run
  args.trainer.max_steps = 1500;
  args.trainer.val_check_interval = volt::BatchAmount(int64_t{500});
  args.trainer.limit_val_batches = volt::BatchAmount(int64_t{20});
  args.trainer.log_every_n_steps = 25;
  CharArgs c;
  int code = 0;
  auto add_flags = [&c](CLI::App& app) {
    using namespace volt::examples::detail;
    constexpr long long kMax = INT64_MAX;
    app.add_option("--text", c.text, "text file(s) to train on, comma-separated (default: examples/corpus/licenses.txt)");
    app.add_option("--seq-len", c.seq_len, "context length in characters")->check(integer_in(1, kMax, "a positive integer"));
    app.add_option("--d-model", c.d_model, "embedding width")->check(integer_in(1, kMax, "a positive integer"));
    app.add_option("--heads", c.heads, "attention heads (must divide --d-model)")
        ->check(integer_in(1, kMax, "a positive integer"));
    app.add_option("--layers", c.layers, "TransformerEncoderLayers")->check(integer_in(1, 1024, "an integer from 1 to 1024"));
    app.add_option("--ff-dim", c.ff_dim, "feed-forward width")->check(integer_in(1, kMax, "a positive integer"));
    app.add_option("--dropout", c.dropout, "dropout probability in the layers")->check(CLI::Range(0.0, 0.99));
    app.add_option("--sample-chars", c.sample_chars, "characters to generate after training (0: none)")
        ->check(integer_in(0, kMax, "a non-negative integer"));
  };
  if (!parse_args(argc, argv, "Volt character-level transformer language model", args, code, add_flags)) return code;
  try {
    VOLT_CHECK(c.d_model % c.heads == 0, "--heads (", c.heads, ") must divide --d-model (", c.d_model, ")");
    prepare_output_dir(args.out);
    auto throughput = std::make_shared<volt::ThroughputMonitor>();
    volt::Trainer trainer(trainer_options(args, throughput));

    const Corpus corpus(read_text(c.text));
    volt::seed_everything(args.seed);
    CharTransformer model(corpus.size(), c, args.lr);
    CharDataModule dm(corpus.tokens, c.seq_len, args.batch_size, args.num_workers, args.seed);
    const bool rank0 = trainer.strategy().is_global_zero();
    if (rank0)
      std::cout << name << ": " << corpus.tokens.numel() << " characters, vocabulary " << corpus.size() << ", "
                << model.num_parameters() << " parameters\n";
    trainer.fit(model, dm, args.resume);
    volt::MetricMap results;
    if (!trainer.interrupted()) {
      auto test = trainer.test(model, dm);
      if (!test.empty()) results = test[0];
    }
    results["train_loss_first"] = model.first_loss.defined() ? model.first_loss.item() : std::nan("");
    results["train_loss_last50"] = model.recent_train_loss();
    results["steps"] = static_cast<double>(trainer.global_step());
    results["vocab_size"] = static_cast<double>(corpus.size());
    if (rank0) {
      write_results(args.out, name, results, *throughput, model.device(), args, trainer.interrupted());
      std::cout << name << ": " << trainer.global_step() << " steps, training loss " << results["train_loss_first"]
                << " (first step) -> " << results["train_loss_last50"] << " (mean of the last 50)";
      if (results.count("test_loss")) std::cout << ", test_loss " << results["test_loss"];
      std::cout << "\nresults written to " << args.out << "/results.json\n";
      if (c.sample_chars > 0 && !trainer.interrupted())
        std::cout << "--- sample ---\n" << sample(model, corpus, "This License ", c.sample_chars, args.seed) << "\n";
    }
    if (trainer.interrupted()) return 128 + trainer.interrupt_signal();
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
