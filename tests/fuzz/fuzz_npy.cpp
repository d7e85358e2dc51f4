// libFuzzer target: data::parse_npy on arbitrary bytes, and data::read_npz / npz_keys on the same bytes as an
// archive file (zip structure, stored and deflate members, the .npy members inside). volt::Error is the
// expected rejection; anything else (another exception, a sanitizer report, a leak, a hang) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <volt/data/npy.h>
#include <volt/data/npz.h>
#include <volt/runtime/error.h>
#include "tests/fuzz/fuzz_util.h"

namespace {

// A returned tensor must be a CPU tensor of a dtype the reader documents, with storage for all its elements.
void check(const volt::Tensor& t) {
  using volt::DType;
  const DType d = t.dtype();
  if (t.is_cuda() || d == DType::bf16 || !t.is_contiguous()) std::abort();
  if (d == DType::boolean) {
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i)
      if (p[i] > 1) std::abort();
  }
  (void)volt::fuzz::touch(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    check(volt::data::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "input.npy"));
  } catch (const volt::Error&) {
  }
  const std::string& path = volt::fuzz::write_input(data, size, ".npz");
  try {
    for (const auto& [key, t] : volt::data::read_npz(path)) check(t);
  } catch (const volt::Error&) {
  }
  try {
    for (const auto& key : volt::data::npz_keys(path)) check(volt::data::read_npz_array(path, key));
  } catch (const volt::Error&) {
  }
  return 0;
}
