#pragma once
// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator. philox4x32(counter, key) is a pure function, so the CPU loop and the CUDA kernel produce the same
// numbers for the same (seed, counter) regardless of how the work is split.
#include <cmath>
#include <cstdint>

#include "kernels/common/macros.h"

namespace volt::philox {

struct U4 {
  uint32_t x[4];
};

VOLT_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// counter: 128 bits as (c0..c3); key: 64 bits (the seed).
VOLT_HD U4 philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n1 = lo1;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    uint32_t n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return U4{{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) from 24 random bits.
VOLT_HD float uniform(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }
// Uniform double in [0, 1) from 53 random bits.
VOLT_HD double uniform64(uint32_t a, uint32_t b) {
  uint64_t v = (static_cast<uint64_t>(a) << 21) ^ static_cast<uint64_t>(b >> 11);
  return static_cast<double>(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Element i of a stream of uniform floats starting at 128-bit counter `offset`: each counter yields four
// numbers, so element i uses counter offset + i/4, lane i%4.
VOLT_HD float uniform_at(uint64_t seed, uint64_t offset, uint64_t i) {
  U4 r = philox4x32_10(offset + i / 4, 0, seed);
  return uniform(r.x[i % 4]);
}

// Standard normal number i (Box-Muller on lanes (0,1) and (2,3) of counter offset + i/2).
VOLT_HD float normal_at(uint64_t seed, uint64_t offset, uint64_t i) {
  U4 r = philox4x32_10(offset + i / 2, 0, seed);
  uint32_t a = r.x[(i % 2) * 2], b = r.x[(i % 2) * 2 + 1];
  float u1 = (static_cast<float>(a >> 8) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  float u2 = uniform(b);
  // Single-precision libm on both sides: CPU and CUDA agree to within a few ulps (uniforms agree exactly).
  return ::sqrtf(-2.0f * ::logf(u1)) * ::cosf(6.28318530717958648f * u2);
}

}  // namespace volt::philox
