// libFuzzer target: data::decode_image (PNG through libpng's simplified API, JPEG through libjpeg-turbo) on
// arbitrary bytes, as gray and as RGB. volt::Error is the expected rejection; anything else (another exception,
// a sanitizer report, a leak, a hang) is a bug. The pixel limit keeps a forged header from asking for
// gigabytes (the run's -rss_limit_mb is 2048).
#include <cstdint>
#include <cstdlib>

#include <volt/data/image.h>
#include <volt/runtime/error.h>
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int channels : {1, 3}) {
    try {
      const volt::Tensor t = volt::data::decode_image(data, size, channels, "input", int64_t(1) << 22);
      if (t.dtype() != volt::DType::u8 || t.dim() != 3 || t.size(0) != channels || t.size(1) < 1 || t.size(2) < 1 ||
          t.size(1) * t.size(2) > (int64_t(1) << 22))
        std::abort();
      (void)volt::fuzz::touch(t);
    } catch (const volt::Error&) {
    }
  }
  return 0;
}
