// libFuzzer target: ModelCheckpoint states in a checkpoint record that name paths (inside the run, with "..",
// absolute elsewhere, through links out of the checkpoint directory, with an empty or missing dirpath), resumed
// by a real Trainer that saves and rotates its checkpoints. The oracle (checkpoint_paths_case.h): the run ends
// or stops with a volt::Error, and no file outside the run directory is deleted, created or changed. Anything
// else aborts, and libFuzzer keeps the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint_paths_case.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const volt::fuzz::PathsSandbox sandbox;
  const nlohmann::json input =
      nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (input.is_discarded()) return 0;
  const volt::fuzz::PathsCaseResult r = sandbox.run_case(input);
  if (!r.unexpected.empty()) {
    std::fprintf(stderr, "fuzz_checkpoint_paths: an exception other than volt::Error: %s\n", r.unexpected.c_str());
    std::abort();
  }
  if (!r.changed.empty()) {
    for (const auto& c : r.changed) std::fprintf(stderr, "fuzz_checkpoint_paths: outside the run: %s\n", c.c_str());
    std::abort();
  }
  return 0;
}
