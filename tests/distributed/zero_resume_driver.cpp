// One leg of the cross-world-size resume check (check_zero_resume.sh): trains tests/distributed's ZeroMlp
// under a strategy for a number of optimizer steps, with a global batch of 12 at any world size (12 / world per
// rank: the same trajectory up to rounding), and saves a checkpoint at the end.
//
//   zero_resume_driver [--fsdp-net] STRATEGY[+sharded] STEPS SAVE_STEM [RESUME_STEM [REFERENCE_STEM]]
//
// "+sharded" saves with checkpoint_layout = sharded (one shard file per rank). A sharded checkpoint to resume
// from or compare with is read through consolidate_tensors (its full layout).
//
// --fsdp-net trains FsdpNet (fsdp_test_module.h: wrapped units, one called twice) instead of ZeroMlp, with
// its test wrap policy when the strategy is fsdp (check_fsdp_resume.sh).
// With RESUME_STEM, right after the checkpoint is loaded, the parameters and the optimizer state in the full
// layout (gathered from the shards under ZeRO) must equal the checkpoint's tensors exactly. With REFERENCE_STEM,
// the final parameters must equal that checkpoint's to 1e-9. Prints "zero-resume ok" on rank 0 when all holds;
// exits 1 otherwise.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include <volt/distributed/process_group.h>
#include <volt/nn/serialization.h>
#include <volt/trainer/checkpoint/sharded.h>

#include "distributed/fsdp_test_module.h"
#include "distributed/zero_test_module.h"

using namespace volt;

namespace {

bool g_failed = false;

void fail(const std::string& what) {
  std::cerr << "zero_resume_driver: " << what << "\n";
  g_failed = true;
}

std::map<std::string, std::vector<double>> values(const nn::StateDict& sd) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [k, t] : sd) out[k] = t.to(DType::f64).contiguous().to_vector<double>();
  return out;
}

// A checkpoint's tensors in the full layout, whichever layout it was written in.
nn::StateDict checkpoint_tensors(const std::string& stem) {
  const nlohmann::json record = nn::load_json(stem + ".json");
  if (!is_sharded_record(record)) return nn::load_safetensors(stem + ".safetensors");
  return consolidate_tensors(stem, parse_sharded_record(record, stem + ".json"));
}

struct CheckResume : Callback {
  std::string stem;
  explicit CheckResume(std::string s) : stem(std::move(s)) {}
  void on_fit_start(Trainer& trainer, TrainModule& m) override {
    nn::StateDict now = trainer.strategy().module_state_dict(m);  // FSDP gathers (rank 0 gets the values)
    // Every rank gathers (a collective under ZeRO); rank 0 compares.
    for (auto& [k, t] : trainer.strategy().optimizer_state(*trainer.optimizers()[0]).tensors)
      now.emplace_back("optimizer.0." + k, t);
    if (!trainer.strategy().is_global_zero()) return;
    auto expect = values(checkpoint_tensors(stem));
    auto got = values(now);
    if (got.size() != expect.size())
      fail("after resume: " + std::to_string(got.size()) + " tensors, the checkpoint has " + std::to_string(expect.size()));
    for (auto& [k, v] : expect)
      if (!got.count(k) || got[k] != v) fail("after resume: '" + k + "' differs from the checkpoint");
    std::cout << "resumed " << trainer.strategy().name() << " at world " << trainer.strategy().world_size() << ": "
              << expect.size() << " tensors equal to " << stem << "\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  const bool fsdp_net = argc > 1 && std::string(argv[1]) == "--fsdp-net";
  if (fsdp_net) {
    --argc;
    ++argv;
  }
  if (argc < 4) {
    std::cerr << "usage: zero_resume_driver [--fsdp-net] STRATEGY[+sharded] STEPS SAVE_STEM [RESUME_STEM [REFERENCE_STEM]]\n";
    return 2;
  }
  std::string strategy = argv[1];
  const std::string sharded_suffix = "+sharded";
  const bool sharded = strategy.size() > sharded_suffix.size() &&
                       strategy.compare(strategy.size() - sharded_suffix.size(), sharded_suffix.size(), sharded_suffix) == 0;
  if (sharded) strategy.resize(strategy.size() - sharded_suffix.size());
  const std::string save = argv[3], resume = argc > 4 ? argv[4] : "", reference = argc > 5 ? argv[5] : "";
  const int64_t steps = std::stoll(argv[2]);
  int rank = 0;
  try {
    TrainerOptions o = test::zero_options(strategy);
    o.max_steps = steps;
    o.max_epochs = -1;
    o.seed = 11;
    o.gradient_clip_val = 0.5;
    if (sharded) o.checkpoint_layout = CheckpointLayout::sharded;
    if (!resume.empty()) o.callbacks.push_back(std::make_shared<CheckResume>(resume));
    o.callbacks.push_back(std::make_shared<test::SaveAtEnd>(save));
    if (fsdp_net && strategy == "fsdp") test::fsdp_test_wrap(o);
    Trainer trainer(o);
    rank = trainer.strategy().global_rank();
    const int world = trainer.strategy().world_size();
    if (12 % world != 0) {
      std::cerr << "zero_resume_driver: world size " << world << " does not divide the global batch of 12\n";
      return 2;
    }
    std::unique_ptr<TrainModule> model;
    if (fsdp_net) model = std::make_unique<test::FsdpNet>();
    else model = std::make_unique<test::ZeroMlp>();
    TrainModule& m = *model;
    auto loader = std::make_shared<data::DataLoader>(
        test::zero_regression_data(24), data::DataLoaderOptions{.batch_size = 12 / world, .shuffle = true, .seed = 5});
    trainer.fit(m, loader, nullptr, resume);
    if (!reference.empty() && trainer.strategy().is_global_zero()) {
      auto ref = values(checkpoint_tensors(reference));
      double worst = 0;
      for (auto& [k, p] : m.named_parameters()) {
        std::vector<double> v = p.detach().contiguous().to_vector<double>();
        if (!ref.count(k) || ref[k].size() != v.size()) {
          fail("reference " + reference + " has no parameter '" + k + "' of " + std::to_string(v.size()) + " values");
          continue;
        }
        for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::abs(v[i] - ref[k][i]));
      }
      std::cout << "max |params - reference| = " << worst << "\n";
      if (!(worst <= 1e-9)) fail("the resumed run's parameters differ from the reference by " + std::to_string(worst));
    }
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (!g_failed && rank == 0) std::cout << "zero-resume ok\n";
  return g_failed ? 1 : 0;
}
