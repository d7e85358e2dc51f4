// GPT-2 on the Trainer: the library model (nn/models/gpt2.h) trained on GPT-2 token shards or on plain text
// (byte tokens), with AdamW (decay on 2-D weights only), linear warm-up and cosine decay, and every Trainer flag
// (--precision, --strategy, --gradient-clip-val, --accumulate-grad-batches, ...; see trainer/cli/option_table.h).
//
//   build/examples/gpt2 --accelerator cpu --max-steps 300                  # tiny, on examples/corpus/licenses.txt
//   build/examples/gpt2 --model 124M --data train_000001.bin,train_000002.bin --val-data val_000000.bin \
//       --vocab 50304 --seq-len 1024 --batch-size 16 --precision bf16-mixed --accelerator gpu
//
// --data: token shard files (named *.bin, or starting with the shard magic number) or text files,
// comma-separated. With text and no --val-data, every tenth block of 2048 bytes is held out for validation. The
// training windows are shuffled unless --no-shuffle keeps the reference script's order. --recompute recomputes
// each block's activations in backward (nn/models/gpt2_recompute.h). results.json gets the
// final validation loss and, for text, the bigram entropy of the training bytes (the loss of the best
// one-token-context model).
#include <iostream>

#include "examples/example_common.h"
#include "examples/gpt2_module.h"
#include <volt/nn/models/gpt2_recompute.h>

#ifndef VOLT_SOURCE_DIR
#define VOLT_SOURCE_DIR "."
#endif

int main(int argc, char** argv) {
  using namespace volt;
  using namespace volt::examples;
  const std::string name = "gpt2";
  Args args;
  args.data = VOLT_SOURCE_DIR "/examples/corpus/licenses.txt";
  args.out = "runs/gpt2";
  args.batch_size = 16;
  args.lr = 3e-3;
  args.epochs = 1000;  // --max-steps ends the run
  args.trainer.max_steps = 300;
  args.trainer.gradient_clip_val = 1.0;
  args.trainer.limit_val_batches = BatchAmount(int64_t{20});
  args.trainer.log_every_n_steps = 25;
  std::string model_name = "tiny", val_data, init_path, save_path;
  int64_t vocab = 256, seq_len = 64;
  bool shuffle = true, recompute = false;
  GPT2TrainOptions topt;
  topt.warmup_steps = 20;
  int code = 0;
  auto add_flags = [&](CLI::App& app) {
    using namespace volt::examples::detail;
    constexpr long long kMax = INT64_MAX;
    app.get_option("--data")->description(
        "training token shards (.bin, the GPT-2 shard format) or text files (byte tokens), comma-separated");
    app.add_option("--model", model_name, "GPT-2 size: tiny | 124M | 350M | 774M")
        ->check(one_of(nn::gpt2_config_names()));
    app.add_option("--val-data", val_data, "validation token shards or text files, comma-separated");
    app.add_option("--vocab", vocab, "vocabulary size (256 for text; 50304 for GPT-2 tokenizer shards)")
        ->check(integer_in(1, 65536, "an integer from 1 to 65536"));
    app.add_option("--seq-len", seq_len, "context length T (the model's block size)")
        ->check(integer_in(1, kMax, "a positive integer"));
    app.add_option("--weight-decay", topt.weight_decay, "AdamW weight decay of the 2-D weights")
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--warmup-steps", topt.warmup_steps, "linear learning-rate warm-up steps")
        ->check(integer_in(0, kMax, "a non-negative integer"));
    app.add_option("--decay-steps", topt.decay_steps,
                   "cosine decay to 10% of --lr over this many steps after warm-up (0: constant)")
        ->check(integer_in(0, kMax, "a non-negative integer"));
    cli::add_bool_flag(app, "--shuffle,!--no-shuffle", shuffle,
                       "shuffle the training windows (--no-shuffle: the reference script's order)");
    app.add_flag("--recompute", recompute,
                 "recompute each block's activations in backward instead of keeping them (less memory, one more "
                 "forward; same gradients)");
    app.add_option("--init", init_path, "initial weights (safetensors under the PyTorch GPT-2 names)");
    app.add_option("--save-weights", save_path, "write the trained weights here (safetensors, same names)");
  };
  if (!parse_args(argc, argv, "Volt GPT-2 language model", args, code, add_flags)) return code;
  try {
    prepare_output_dir(args.out);
    topt.lr = args.lr;
    seed_everything(args.seed);
    GPT2Module model(nn::gpt2_config(model_name, vocab, seq_len), topt);
    nn::set_recompute(model.gpt, recompute);
    // Tokens/s, and MFU by the reference script's count (6N + 6LCT per token), which includes the attention the
    // traced GEMM counter does not see.
    auto throughput = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{
        .length_fn = [](const Batch& b) { return b.input.numel(); },
        .flops_per_sample = model.gpt.flops_per_token(seq_len) * static_cast<double>(seq_len)});
    Trainer trainer(trainer_options(args, throughput));
    GPT2DataModule dm(args.data, val_data, vocab, seq_len, args.batch_size, args.num_workers, shuffle);
    if (!init_path.empty()) model.gpt.load(init_path);
    const bool rank0 = trainer.strategy().is_global_zero();
    const bool text = !dm.train_shards()[0]->mapped();
    double bigram = std::nan("");
    if (text) bigram = bigram_entropy(dm.train_shards(), vocab);
    if (rank0) {
      int64_t n = 0;
      for (const auto& s : dm.train_shards()) n += s->size();
      std::cout << name << ": " << model_name << " (" << model.gpt.config.str() << "), "
                << model.gpt.num_parameters() << " parameters, " << n << " training tokens";
      if (text) std::cout << ", bigram entropy " << bigram << " nats";
      std::cout << "\n";
    }
    trainer.fit(model, dm, args.resume);
    MetricMap results;
    if (!trainer.interrupted() && !dm.val_shards().empty()) {
      auto val = trainer.validate(model, dm);
      if (!val.empty()) results = val[0];
    }
    results["steps"] = static_cast<double>(trainer.global_step());
    results["bigram_entropy"] = bigram;
    results["flops_per_token"] = model.gpt.flops_per_token(seq_len);
    if (rank0) {
      if (!save_path.empty()) model.gpt.save(save_path);
      write_results(args.out, name, results, *throughput, model.device(), args, trainer.interrupted());
      std::cout << name << ": " << trainer.global_step() << " steps";
      if (results.count("val_loss")) std::cout << ", val_loss " << results["val_loss"];
      std::cout << "\nresults written to " << args.out << "/results.json\n";
    }
    if (trainer.interrupted()) return 128 + trainer.interrupt_signal();
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
