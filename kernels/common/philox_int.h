#pragma once
// Random integers and linspace values shared by the CPU loop (kernels/cpu/factory.cpp) and the CUDA kernel
// (kernels/cuda/factory.cu): integer and IEEE double arithmetic with explicit fused multiply-adds only, so both
// backends produce the same bits.
#include <cmath>
#include <cstdint>

#include <volt/kernels/common/macros.h>
#include <volt/kernels/common/philox.h>

namespace volt::philox {

// Element i of a stream of random integers in [low, low + range) (range >= 1) starting at 128-bit counter
// `offset`: 64 bits from lanes 2(i%2), 2(i%2)+1 of counter offset + i/2, reduced mod range (the bias, at most
// range / 2^64, is below anything a test can see). The sum is formed in uint64 so it never overflows.
VOLT_HD int64_t randint_at(uint64_t seed, uint64_t offset, uint64_t i, int64_t low, uint64_t range) {
  U4 r = philox4x32_10(offset + i / 2, 0, seed);
  const uint64_t bits = (static_cast<uint64_t>(r.x[(i % 2) * 2]) << 32) | r.x[(i % 2) * 2 + 1];
  return static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
}

}  // namespace volt::philox

namespace volt {

// Value i of linspace(start, end, n) for n >= 2: PyTorch's symmetric formula (start + step i for the first
// half, end - step (n - 1 - i) for the second), so both endpoints are exact.
VOLT_HD double linspace_at(double start, double end, int64_t n, int64_t i) {
  const double step = (end - start) / static_cast<double>(n - 1);
  if (i < n / 2) return ::fma(step, static_cast<double>(i), start);
  return ::fma(-step, static_cast<double>(n - 1 - i), end);
}

}  // namespace volt
