#pragma once
/// @file
/// Counter-based random state (Philox 4x32-10). A draw of n numbers reserves n counters from the generator;
/// the numbers depend only on (seed, counter), so CPU and CUDA produce the same values for the same seed and
/// offset, in any order and with any parallel split.
#include <cstdint>
#include <mutex>

namespace volt {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> l(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t off) {
    std::lock_guard<std::mutex> l(mu_);
    offset_ = off;
  }
  // Reserves `n` consecutive 128-bit Philox counters and returns the first.
  uint64_t reserve(uint64_t n) {
    std::lock_guard<std::mutex> l(mu_);
    uint64_t start = offset_;
    offset_ += n;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  std::mutex mu_;
};

/// The global generator, or on a thread inside a ThreadGeneratorScope the generator that scope installed.
Generator& default_generator();
/// Seeds the global generator (and so rand/randn/dropout/shuffles that use it).
void manual_seed(uint64_t seed);

/// RAII: makes default_generator() return `gen` on this thread for the scope's lifetime (data-parallel replicas
/// draw their dropout masks from their own deterministic streams this way; trainer/strategies/dp.h). nullptr
/// restores the global generator for the scope. Scopes nest.
class ThreadGeneratorScope {
 public:
  explicit ThreadGeneratorScope(Generator* gen);
  ~ThreadGeneratorScope();
  ThreadGeneratorScope(const ThreadGeneratorScope&) = delete;
  ThreadGeneratorScope& operator=(const ThreadGeneratorScope&) = delete;

 private:
  Generator* prev_;
};

}  // namespace volt
