// libFuzzer target: nn::load_safetensors on arbitrary bytes. volt::Error is the expected rejection; anything
// else (another exception, a sanitizer report, a leak, a hang) is a bug. Every returned tensor is read in full.
#include <cstdint>
#include <cstdlib>
#include <map>

#include <volt/nn/serialization.h>
#include <volt/runtime/error.h>
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = volt::fuzz::write_input(data, size, ".safetensors");
  try {
    std::map<std::string, std::string> meta;
    volt::nn::StateDict sd = volt::nn::load_safetensors(path, &meta);
    for (const auto& [name, t] : sd) {
      if (name.empty() || !t.defined() || t.nbytes() != static_cast<size_t>(t.numel()) * volt::itemsize(t.dtype()))
        std::abort();
      (void)volt::fuzz::touch(t);
    }
  } catch (const volt::Error&) {
  }
  return 0;
}
