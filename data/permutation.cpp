#include <volt/data/permutation.h>

#include <numeric>
#include <utility>

#include <volt/runtime/error.h>
#include <volt/runtime/philox.h>

namespace volt::data {

std::vector<int64_t> randperm(int64_t n, uint64_t seed, uint64_t stream) {
  VOLT_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  // Draw k (k = 0, 1, ...) is 64 bits from lanes 2(k%2), 2(k%2)+1 of counter (k/2, stream).
  philox::U4 r{};
  for (int64_t k = 0, i = n - 1; i > 0; ++k, --i) {
    if (k % 2 == 0) r = philox::philox4x32_10(static_cast<uint64_t>(k / 2), stream, seed);
    const int lane = static_cast<int>(k % 2) * 2;
    const uint64_t bits = (static_cast<uint64_t>(r.x[lane]) << 32) | r.x[lane + 1];
    // The modulo bias is below n / 2^64: irrelevant for any dataset that fits in memory.
    const int64_t j = static_cast<int64_t>(bits % static_cast<uint64_t>(i + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

}  // namespace volt::data
