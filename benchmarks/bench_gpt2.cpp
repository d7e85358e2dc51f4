// bench_gpt2: the GPT-2 training step (nn::GPT2 forward + backward, gradient clipping at 1.0, AdamW with decay on
// 2-D weights) in a hand-written loop, at the model, batch, sequence length and precision of
// ../shared/anchors/gpt2_torch.py, on uniform random tokens. After --warmup steps it times --repeats runs of
// --steps steps (each between two device synchronisations) and prints one JSON line: ms_per_step min/median/max
// over the runs, tokens_per_s and mfu at the median, the peak tensor memory of the timed steps, and the memory the
// allocator holds from the device after them (tensors and its cache of free blocks).
//
//   build/benchmarks/bench_gpt2 --model 124M --batch 16 --seq 1024 --precision bf16-mixed --accelerator gpu
//   build-cpu/benchmarks/bench_gpt2 --model tiny --batch 4 --seq 64 --vocab 256 --accelerator cpu
//   build/benchmarks/bench_gpt2 --model 350M --recompute ...     # blocks recomputed in backward (gpt2_recompute.h)
//
// The token stream is uploaded once, before the steps: each step's inputs are views of it (no step waits for a
// copy). --cuda-graphs captures the step (forward, backward, clipping, AdamW) as a graph after the warm-up, runs
// the captured step once untimed, and times replays, each after copying its tokens into the captured inputs;
// "cuda_graphs" says "on", "off", or "failed: <why>" (the steps then ran eagerly). With a graph, the peak memory
// and "attention" cover the capture, where the step's host code (its allocations, its attention calls) ran.
// "timed_system_allocs": the allocator's raw allocations during the timed steps (on a GPU its cudaMalloc calls, 0
// in a steady state; on the CPU also every block under 64 KiB, which malloc serves).
//
// "attention" says which implementation scaled_dot_product_attention ran in the timed steps (kernels/sdpa_path.h):
// "cudnn" (cuDNN's fused SDPA), "fused" (Volt's fused softmax between two matmuls), or "mixed"; "attention_note" is
// why the last call did not go to cuDNN (empty when none fell back). VOLT_DISABLE_CUDNN_SDPA=1 forces "fused".
// "attention_chunked_calls": how many of the fused calls ran in chunks of query rows (sdpa_stats().chunked).
//
// Loss parity with the reference on a GPU: --init loads its initial weights (safetensors under its tensor names, as
// written by gpt2_torch.py --init-out), --tokens reads its token stream (a GPT-2 token shard, --tokens-out) instead of
// random tokens, and --losses adds every step's loss (warm-up steps included, as the reference counts them) to the
// JSON line; scripts/gpt2_loss_parity.py compares the two lines.
//   bench_gpt2 --model 124M --batch 8 --steps 50 --warmup 0 --repeats 1 --init init.safetensors \
//       --tokens tokens.bin --losses
//
// --replay-allocator (CPU only) records the run's allocations, from the model's construction on, and replays them
// through the CUDA caching allocator's policy and the whole-block policy it replaced (benchmarks/alloc_replay.h):
// "replay_*" fields give each one's peak over the timed steps and what it holds at the end, in GiB, beside the
// peak of the bytes the tensors asked for.
//   bench_gpt2 --accelerator cpu --model 124M --batch 4 --seq 256 --steps 1 --warmup 1 --repeats 1 --replay-allocator
//
// MFU = flops_per_token (6N + 6LCT, nn::GPT2::flops_per_token) x tokens/s over the device's dense bf16 peak:
// --peak-tflops, else 989 for compute capability 9.0 (H100/H200 SXM) and 312 for 8.0 (A100); null otherwise.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "alloc_replay.h"

#include <volt/data/token_shard.h>
#include <volt/kernels/graph.h>
#include <volt/kernels/sdpa_path.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/models/gpt2.h>
#include <volt/nn/models/gpt2_recompute.h>
#include <volt/nn/optim.h>
#include <volt/runtime/allocator.h>
#include <volt/runtime/autocast.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;

int main(int argc, char** argv) {
  std::string model_name = "124M", precision = "bf16-mixed", accelerator = "gpu";
  int64_t batch = 16, seq = 1024, vocab = 50304, steps = 20, warmup = 5, repeats = 3;
  double peak_tflops = 0;
  uint64_t seed = 1337;
  bool recompute = false, losses = false, replay_allocator = false, cuda_graphs = false;
  std::string init_path, tokens_path;
  CLI::App app{"Volt GPT-2 training-step benchmark"};
  app.add_option("--model", model_name, "tiny | 124M | 350M | 774M");
  app.add_option("--batch", batch, "batch size B")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "sequence length T")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary size (50304 = GPT-2's 50257 padded)")->check(CLI::Range(1, 65536));
  app.add_option("--steps", steps, "timed steps per run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "timed runs (min/median/max over them)")->check(CLI::PositiveNumber);
  app.add_option("--precision", precision, "32-true | bf16-mixed")->check(CLI::IsMember({"32-true", "bf16-mixed"}));
  app.add_option("--accelerator", accelerator, "gpu | cpu")->check(CLI::IsMember({"gpu", "cpu"}));
  app.add_option("--peak-tflops", peak_tflops, "the device's dense bf16 peak, for the MFU (default: known GPUs)");
  app.add_option("--seed", seed, "weights and tokens");
  app.add_flag("--recompute", recompute, "recompute each block's activations in backward instead of keeping them");
  app.add_option("--init", init_path, "initial weights (safetensors under the reference's GPT-2 tensor names)")
      ->check(CLI::ExistingFile);
  app.add_option("--tokens", tokens_path, "token stream to train on (GPT-2 token shard) instead of random tokens")
      ->check(CLI::ExistingFile);
  app.add_flag("--losses", losses, "add every step's loss to the JSON line (one device synchronisation per step)");
  app.add_flag("--cuda-graphs", cuda_graphs,
               "capture the step as a graph after the warm-up and replay it (the \"cuda_graphs\" field says how it "
               "went; a capture that fails leaves the steps eager)");
  app.add_flag("--replay-allocator", replay_allocator,
               "CPU only: replay the run's allocations through the CUDA caching allocator's policy and the one it "
               "replaced (replay_* fields)");
  CLI11_PARSE(app, argc, argv);
  try {
    const Device device = accelerator == "gpu" ? cuda_device(0) : kCPU;
    check_device_usable(device, "--accelerator");
    if (peak_tflops <= 0 && device.is_cuda()) {
      const int cc = cuda_compute_capability(0);
      peak_tflops = cc == 90 ? 989.0 : cc == 80 ? 312.0 : 0.0;
    }
    if (cuda_graphs && warmup < 1)
      throw std::invalid_argument("--cuda-graphs needs --warmup of at least 1 (the optimizer's state and the "
                                  "library's plans are made by an eager step before the capture)");
    if (replay_allocator && device.is_cuda())
      throw std::invalid_argument("--replay-allocator replays a CPU run's allocations; use --accelerator cpu");
    std::unique_ptr<bench::AllocationReplay> replay;
    if (replay_allocator) replay = std::make_unique<bench::AllocationReplay>();
    manual_seed(seed);
    nn::GPT2 model(nn::gpt2_config(model_name, vocab, std::max<int64_t>(1024, seq)));
    if (!init_path.empty()) model.load(init_path);
    model.to(device);
    nn::set_recompute(model, recompute);
    optim::AdamW opt({optim::ParamGroup{model.decay_parameters(), 6e-4, {.weight_decay = 0.1}},
                      optim::ParamGroup{model.no_decay_parameters(), 6e-4, {.weight_decay = 0.0}}},
                     {.lr = 6e-4, .betas = {0.9, 0.95}, .eps = 1e-8});
    const std::vector<Tensor> params = model.parameters();
    Generator gen(seed);
    // One stream of B*T*(warmup + repeats*steps) + 1 tokens, consumed step by step as the reference does.
    const int64_t total_steps = warmup + (cuda_graphs ? 1 : 0) + repeats * steps, n = batch * seq;
    // Uniform tokens below min(vocab, 50257) - 1 (the cast to i64 may round up by one).
    const double top = static_cast<double>(std::min<int64_t>(vocab, 50257) - 1);
    Tensor stream;
    if (tokens_path.empty()) {
      stream = rand({total_steps * n + 1}, DType::f64, kCPU, &gen, 0.0, top).to(DType::i64);
    } else {
      const data::TokenShard shard(tokens_path, vocab);
      if (shard.size() < total_steps * n + 1)
        throw std::invalid_argument("--tokens " + tokens_path + " holds " + std::to_string(shard.size()) +
                                    " tokens; " + std::to_string(total_steps) + " steps of batch " +
                                    std::to_string(batch) + " x seq " + std::to_string(seq) + " need " +
                                    std::to_string(total_steps * n + 1));
      std::vector<int64_t> ids(shard.data(), shard.data() + total_steps * n + 1);
      stream = from_vector(ids, {total_steps * n + 1});
    }
    // On the device once: a step's inputs are views of it, so no step waits for an upload.
    stream = stream.to(device);
    std::vector<double> step_losses;
    int64_t pos = 0;
    Tensor last_loss;
    auto body = [&](const Tensor& x, const Tensor& y) {
      Tensor loss;
      {
        AutocastGuard ac(precision == "bf16-mixed", DType::bf16);
        loss = model.loss(x, y);
      }
      loss.backward();
      nn::clip_grad_norm_no_sync_(params, 1.0);
      opt.step();
      opt.zero_grad();
      return loss.detach();
    };
    // --cuda-graphs: the step captured once after the warm-up (kernels/graph.h), its inputs copied into gx/gy and
    // the graph replayed for every later step.
    std::unique_ptr<Graph> graph;
    Tensor gx, gy, graph_loss;
    std::string graphs_state = cuda_graphs ? "" : "off";
    auto step = [&] {
      Tensor x = stream.narrow(0, pos, n).reshape({batch, seq});
      Tensor y = stream.narrow(0, pos + 1, n).reshape({batch, seq});
      pos += n;
      if (graph) {
        gx.copy_(x);
        gy.copy_(y);
        if (!graph->replay()) throw std::runtime_error("the captured step refused a replay");
        last_loss = graph_loss;
      } else {
        last_loss = body(x, y);
      }
      if (losses) step_losses.push_back(last_loss.item());
    };
    auto capture = [&] {
      // The captured inputs hold the next step's tokens while capturing (the CPU's graph checks targets then).
      gx = stream.narrow(0, pos, n).reshape({batch, seq}).clone();
      gy = stream.narrow(0, pos + 1, n).reshape({batch, seq}).clone();
      // The capture cannot reuse the warm-up's cached blocks: give them back first (as the Trainer does).
      synchronize(device);
      empty_cache(device);
      graph = std::make_unique<Graph>(device);
      try {
        graph->capture_begin();
        graph_loss = body(gx, gy);
        graph->capture_end();
        graph->keep(graph_loss);
        graphs_state = "on";
      } catch (const std::exception& e) {
        graph->capture_abort();
        graph.reset();
        opt.zero_grad(true);  // gradients the captured backward assigned were never computed
        graphs_state = std::string("failed: ") + e.what();
      }
    };
    for (int64_t i = 0; i < warmup; ++i) step();
    synchronize(device);
    const double first_loss = warmup > 0 ? last_loss.item() : 0.0;  // the last warm-up step's, eager either way
    // Peak memory and the attention used are taken over the timed steps; with a graph, over its capture too
    // (the host code, and so every allocation and attention call, ran there; replays allocate nothing).
    reset_peak_memory_stats(device);
    if (replay) replay->mark();
    reset_sdpa_stats();
    if (cuda_graphs) {
      capture();
      step();  // the captured step's first replay (or, if the capture failed, an eager step), untimed
    }
    // Raw allocations during the timed steps (on a GPU: cudaMalloc, none once the allocator's cache holds a step).
    const int64_t system_allocs_before = memory_stats(device).num_system_allocs;
    std::vector<double> ms;
    for (int64_t r = 0; r < repeats; ++r) {
      synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < steps; ++i) step();
      synchronize(device);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                   static_cast<double>(steps));
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double tokens_per_s = static_cast<double>(n) / (median / 1e3);
    const double flops = model.flops_per_token(seq);
    std::string mfu = "null";
    if (peak_tflops > 0) mfu = std::to_string(flops * tokens_per_s / (peak_tflops * 1e12));
    const SdpaStats attn = sdpa_stats();
    std::string extra;  // ,"losses":[...] with --losses; the replay_* fields with --replay-allocator
    if (losses) {
      extra = ",\"losses\":[";
      for (size_t i = 0; i < step_losses.size(); ++i) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.6f", i ? "," : "", step_losses[i]);
        extra += buf;
      }
      extra += "]";
    }
    if (replay) {
      const bench::AllocationReplay::Result rr = replay->replay();
      const double gib = 1 << 30;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    ",\"replay_requested_peak_gib\":%.4f,\"replay_split_peak_gib\":%.4f,"
                    "\"replay_split_reserved_gib\":%.4f,\"replay_whole_peak_gib\":%.4f,"
                    "\"replay_whole_reserved_gib\":%.4f",
                    rr.requested_peak / gib, rr.split_peak / gib, rr.split_reserved / gib, rr.whole_peak / gib,
                    rr.whole_reserved / gib);
      extra += buf;
    }
    auto json_text = [](const std::string& text) {  // quotes, backslashes and control characters out
      std::string out;
      for (char c : text)
        if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) out += c;
      return out;
    };
    const std::string attn_note = json_text(attn.last_fallback_reason);
    extra += ",\"attention_chunked_calls\":" + std::to_string(attn.chunked);
    extra += ",\"cuda_graphs\":\"" + json_text(graphs_state) + "\"";
    extra += ",\"timed_system_allocs\":" +
             std::to_string(memory_stats(device).num_system_allocs - system_allocs_before);
    std::printf("{\"impl\":\"volt\",\"device\":\"%s\",\"model\":\"%s\",\"params\":%lld,\"batch\":%lld,\"seq\":%lld,"
                "\"precision\":\"%s\",\"ms_per_step\":%.3f,\"ms_per_step_min\":%.3f,\"ms_per_step_max\":%.3f,"
                "\"repeats\":%lld,\"steps\":%lld,\"tokens_per_s\":%.1f,\"flops_per_token\":%.0f,\"mfu\":%s,"
                "\"peak_tflops\":%g,\"peak_mem_gib\":%.3f,\"peak_mem_bytes\":%lld,\"reserved_mem_gib\":%.3f,"
                "\"recompute\":%s,"
                "\"first_loss\":%.4f,\"last_loss\":%.4f,\"attention\":\"%s\",\"attention_note\":\"%s\"%s}\n",
                device.str().c_str(), model_name.c_str(), static_cast<long long>(model.num_parameters()),
                static_cast<long long>(batch), static_cast<long long>(seq), precision.c_str(), median, sorted.front(),
                sorted.back(), static_cast<long long>(repeats), static_cast<long long>(steps), tokens_per_s, flops,
                mfu.c_str(), peak_tflops, static_cast<double>(memory_stats(device).peak_allocated) / (1 << 30),
                static_cast<long long>(memory_stats(device).peak_allocated),
                static_cast<double>(memory_stats(device).reserved) / (1 << 30), recompute ? "true" : "false",
                first_loss, last_loss.item(), sdpa_path_summary(attn).c_str(), attn_note.c_str(), extra.c_str());
  } catch (const std::exception& e) {
    std::cerr << "bench_gpt2: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
