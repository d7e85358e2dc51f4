#include <volt/kernels/common/kernel_paths.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <utility>

#include <volt/runtime/error.h>

namespace volt::kernel_paths {

namespace {

constexpr std::pair<const char*, Path> kNames[] = {{"warp_norm", kWarpNorm},
                                                    {"packed_columns", kPackedColumns},
                                                    {"lt_dgelu", kLtDgelu},
                                                    {"half_residual", kHalfResidual},
                                                    {"classifier_rows", kClassifierRows},
                                                    {"chunked_head", kChunkedHead},
                                                    {"lt_bgrad", kLtBgrad},
                                                    {"chunked_attention", kChunkedAttention}};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

unsigned parse(const std::string& list) {
  unsigned set = 0;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string name = trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (name.empty()) continue;
    if (name == "all") {
      set |= kAll;
      continue;
    }
    bool known = false;
    for (const auto& [n, p] : kNames)
      if (name == n) {
        set |= p;
        known = true;
      }
    VOLT_CHECK(known, "VOLT_DISABLE_KERNELS: unknown kernel path '", name, "'; expected a comma-separated list of ",
               names(kAll), ", or all");
  }
  return set;
}

std::string names(unsigned set) {
  std::string out;
  for (const auto& [n, p] : kNames) {
    if (!(set & p)) continue;
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

bool disabled(Path p) {
  static const unsigned set = [] {
    const char* v = std::getenv("VOLT_DISABLE_KERNELS");
    return v == nullptr ? 0u : parse(v);
  }();
  return (set & p) != 0;
}

namespace {
constexpr int kPaths = 32;
std::atomic<long long>& taken_count(Path p) {
  static std::atomic<long long> counts[kPaths];
  return counts[std::countr_zero(static_cast<unsigned>(p)) % kPaths];
}
}  // namespace

void note_taken(Path p) { taken_count(p).fetch_add(1, std::memory_order_relaxed); }
long long times_taken(Path p) { return taken_count(p).load(std::memory_order_relaxed); }

}  // namespace volt::kernel_paths
