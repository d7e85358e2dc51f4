// libFuzzer target: data::read_idx on arbitrary bytes (plain or gzip-compressed IDX). volt::Error is the
// expected rejection; anything else (another exception, a sanitizer report, a leak, a hang) is a bug.
#include <cstdint>
#include <cstdlib>

#include <volt/data/idx.h>
#include <volt/runtime/error.h>
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = volt::fuzz::write_input(data, size, ".idx");
  // Any dimension count, then the images form (3 dimensions, as MnistDataModule reads it).
  for (int expected_ndim : {-1, 3}) {
    try {
      volt::Tensor t = volt::data::read_idx(path, expected_ndim);
      if (t.dtype() != volt::DType::u8 || t.dim() < 1 || (expected_ndim >= 0 && t.dim() != expected_ndim) ||
          static_cast<int64_t>(t.nbytes()) != t.numel())
        std::abort();
      (void)volt::fuzz::touch(t);
    } catch (const volt::Error&) {
    }
  }
  return 0;
}
