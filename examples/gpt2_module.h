#pragma once
// The pieces of examples/gpt2 that tests reuse: GPT-2 as a TrainModule (AdamW with decay on 2-D weights only,
// linear warm-up then cosine decay per step), a DataModule over token shards or byte-tokenized text, and the
// bigram entropy of a token stream.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <volt/data/data_module.h>
#include <volt/data/token_shard.h>
#include <volt/data/token_window_dataset.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/models/gpt2.h>
#include <volt/nn/optim.h>
#include <volt/trainer/train_module.h>

namespace volt::examples {

struct GPT2TrainOptions {
  double lr = 6e-4;
  double weight_decay = 0.1;
  double beta2 = 0.95;
  int64_t warmup_steps = 0;  ///< linear warm-up from lr / (warmup_steps + 1) to lr
  int64_t decay_steps = 0;   ///< cosine decay to min_lr_ratio * lr over these steps after warm-up; 0: constant
  double min_lr_ratio = 0.1;
};

class GPT2Module : public TrainModule {
 public:
  GPT2Module(const nn::GPT2Config& config, GPT2TrainOptions options) : gpt(config), opts(options) {
    register_module("gpt", gpt);
    save_hyperparameters({{"n_layer", config.n_layer}, {"n_head", config.n_head}, {"n_embd", config.n_embd},
                          {"vocab_size", config.vocab_size}, {"block_size", config.block_size},
                          {"learning_rate", options.lr}, {"weight_decay", options.weight_decay},
                          {"warmup_steps", options.warmup_steps}, {"decay_steps", options.decay_steps}});
  }
  std::string type_name() const override { return "GPT2Module"; }
  // The step is the same device work for every batch of one shape and reads nothing from the device (the
  // embedding's index check is the kernel's: runtime/index_check.h), so the Trainer may capture it as a graph.
  bool static_training_step() const override { return true; }

  Tensor training_step(const data::Batch& b, int64_t) override {
    Tensor loss = gpt.loss(b.input, b.target);
    log("train_loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const data::Batch& b, int64_t) override {
    log("val_loss", gpt.loss(b.input, b.target), {.prog_bar = true, .sync_dist = true});
  }
  // Epoch-level losses of evaluation are averaged over every rank's batches (sync_dist), so ddp reports the
  // loss of the whole validation set, not rank 0's share.
  void test_step(const data::Batch& b, int64_t) override {
    log("test_loss", gpt.loss(b.input, b.target), {.sync_dist = true});
  }

  Optimizers configure_optimizers() override {
    auto opt = std::make_shared<optim::AdamW>(
        std::vector<optim::ParamGroup>{{gpt.decay_parameters(), opts.lr, {.weight_decay = opts.weight_decay}},
                                       {gpt.no_decay_parameters(), opts.lr, {.weight_decay = 0.0}}},
        optim::AdamWOptions{.lr = opts.lr, .betas = {0.9, opts.beta2}, .eps = 1e-8});
    if (opts.warmup_steps == 0 && opts.decay_steps == 0) return opt;
    std::shared_ptr<optim::LRScheduler> after;
    if (opts.decay_steps > 0)
      after = std::make_shared<optim::CosineAnnealingLR>(*opt, opts.decay_steps, opts.lr * opts.min_lr_ratio);
    auto sched = std::make_shared<optim::LinearWarmupLR>(*opt, opts.warmup_steps, after);
    return Optimizers(opt, SchedulerConfig{.scheduler = sched, .interval = SchedulerInterval::step});
  }

  nn::GPT2 gpt;
  GPT2TrainOptions opts;
};

// The files named in `list` (comma-separated, empty entries skipped).
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string s;
  while (std::getline(ss, s, ','))
    if (!s.empty()) out.push_back(s);
  return out;
}

// Whether `path` is to be read as a token shard: its name ends in ".bin" (a shard then has to be valid: a wrong
// magic number is an error, not text) or it starts with the shard magic number. Anything else is text.
inline bool is_token_shard(const std::string& path) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0) return true;
  std::ifstream f(path, std::ios::binary);
  int32_t magic = 0;
  f.read(reinterpret_cast<char*>(&magic), sizeof(magic));
  return f.gcount() == sizeof(magic) && magic == data::TokenShard::kMagic;
}

// The bytes of the text files in `list`, concatenated, as byte tokens.
inline std::vector<uint16_t> read_text_tokens(const std::vector<std::string>& files, const std::string& flag) {
  std::string all;
  for (const auto& path : files) {
    std::ifstream f(path, std::ios::binary);
    VOLT_CHECK(f.good(), flag, ": cannot read '", path, "' (expected token shards or text files)");
    std::ostringstream body;
    body << f.rdbuf();
    all += body.str();
  }
  return data::ByteTokenizer::encode(all);
}

// The conditional entropy H(next | current), in nats, of the empirical bigram distribution of the token streams
// `streams` (pairs counted within each stream): the loss of the best model that sees one token of context,
// measured on the tokens it was counted from.
inline double bigram_entropy(const std::vector<std::pair<const uint16_t*, int64_t>>& streams, int64_t vocab) {
  std::vector<double> pair(static_cast<size_t>(vocab * vocab), 0.0), first(static_cast<size_t>(vocab), 0.0);
  double total = 0;
  for (const auto& [tokens, n] : streams)
    for (int64_t i = 0; i + 1 < n; ++i) {
      pair[static_cast<size_t>(tokens[i] * vocab + tokens[i + 1])] += 1;
      first[tokens[i]] += 1;
      total += 1;
    }
  double h = 0;
  for (int64_t a = 0; a < vocab; ++a)
    for (int64_t b = 0; b < vocab; ++b) {
      const double c = pair[static_cast<size_t>(a * vocab + b)];
      if (c > 0) h -= c / total * std::log(c / first[static_cast<size_t>(a)]);
    }
  return h;
}
inline double bigram_entropy(const uint16_t* tokens, int64_t n, int64_t vocab) {
  return bigram_entropy({{tokens, n}}, vocab);
}
inline double bigram_entropy(const std::vector<std::shared_ptr<const data::TokenShard>>& shards, int64_t vocab) {
  std::vector<std::pair<const uint16_t*, int64_t>> streams;
  for (const auto& s : shards) streams.emplace_back(s->data(), s->size());
  return bigram_entropy(streams, vocab);
}

// Training and validation windows; the training windows are shuffled (seeded by the Trainer) unless `shuffle` is
// false, which keeps the reference script's order (batch k = its step k). From token shards: --data for
// training, --val-data (optional) for validation. From text: the bytes of --data, with every tenth block of
// 2048 bytes held out for validation (unless --val-data names text of its own).
class GPT2DataModule : public data::DataModule {
 public:
  static constexpr int64_t kHoldoutBlock = 2048;

  GPT2DataModule(const std::string& train_list, const std::string& val_list, int64_t vocab_size, int64_t seq_len,
                 int64_t batch_size, int num_workers, bool shuffle = true)
      : seq_len_(seq_len), batch_size_(batch_size), num_workers_(num_workers), shuffle_(shuffle) {
    const auto train_files = split_list(train_list);
    VOLT_CHECK(!train_files.empty(), "--data: no file given");
    if (is_token_shard(train_files[0])) {
      for (const auto& f : train_files) train_.push_back(std::make_shared<data::TokenShard>(f, vocab_size));
      for (const auto& f : split_list(val_list)) val_.push_back(std::make_shared<data::TokenShard>(f, vocab_size));
      return;
    }
    VOLT_CHECK(vocab_size >= data::ByteTokenizer::kVocabSize, "--vocab ", vocab_size,
               " is too small for byte-tokenized text (needs at least 256)");
    auto toks = read_text_tokens(train_files, "--data");
    if (!val_list.empty()) {
      train_.push_back(std::make_shared<data::TokenShard>(std::move(toks), train_list, vocab_size));
      val_.push_back(std::make_shared<data::TokenShard>(read_text_tokens(split_list(val_list), "--val-data"),
                                                        val_list, vocab_size));
      return;
    }
    // Every tenth block of kHoldoutBlock bytes is held out, so that validation text comes from every part of the
    // corpus (a corpus of several documents would otherwise be validated on the last one only).
    std::vector<uint16_t> run;
    int64_t run_start = 0;
    auto flush = [&](int64_t end) {
      if (!run.empty())
        train_.push_back(std::make_shared<data::TokenShard>(std::move(run), byte_range(train_list, run_start, end),
                                                            vocab_size));
      run.clear();
    };
    const auto n = static_cast<int64_t>(toks.size());
    for (int64_t b = 0; b * kHoldoutBlock < n; ++b) {
      const int64_t begin = b * kHoldoutBlock, end = std::min(n, begin + kHoldoutBlock);
      if (b % 10 == 9) {
        flush(begin);
        run_start = end;
        val_.push_back(std::make_shared<data::TokenShard>(
            std::vector<uint16_t>(toks.begin() + begin, toks.begin() + end), byte_range(train_list, begin, end),
            vocab_size));
      } else {
        run.insert(run.end(), toks.begin() + begin, toks.begin() + end);
      }
    }
    flush(n);
  }
  void setup(const std::string&) override {
    if (!train_ds_) train_ds_ = std::make_shared<data::TokenWindowDataset>(train_, seq_len_);
    if (!val_ds_ && !val_.empty()) val_ds_ = std::make_shared<data::TokenWindowDataset>(val_, seq_len_);
  }
  std::shared_ptr<data::DataLoader> train_dataloader() override { return loader(train_ds_, true); }
  std::shared_ptr<data::DataLoader> val_dataloader() override { return val_ds_ ? loader(val_ds_, false) : nullptr; }
  std::shared_ptr<data::DataLoader> test_dataloader() override { return val_dataloader(); }

  const std::vector<std::shared_ptr<const data::TokenShard>>& train_shards() const { return train_; }
  const std::vector<std::shared_ptr<const data::TokenShard>>& val_shards() const { return val_; }

 private:
  static std::string byte_range(const std::string& name, int64_t begin, int64_t end) {
    return name + " bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
  }
  std::shared_ptr<data::DataLoader> loader(const std::shared_ptr<data::TokenWindowDataset>& ds, bool train) {
    data::DataLoaderOptions o;
    o.batch_size = batch_size_;
    o.shuffle = train && shuffle_;
    o.drop_last = train;
    o.num_workers = num_workers_;
    o.persistent_workers = num_workers_ > 0;
    o.pin_memory = true;
    return std::make_shared<data::DataLoader>(ds, o);
  }
  std::vector<std::shared_ptr<const data::TokenShard>> train_, val_;
  std::shared_ptr<data::TokenWindowDataset> train_ds_, val_ds_;
  int64_t seq_len_, batch_size_;
  int num_workers_;
  bool shuffle_;
};

}  // namespace volt::examples
