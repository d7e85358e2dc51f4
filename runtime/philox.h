#pragma once
// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator. philox4x32(counter, key) is a pure function, so the CPU loop and the CUDA kernel produce the same
// numbers for the same (seed, counter) regardless of how the work is split. The generator's state (seed and
// counter) is runtime/generator.h; this is the math over it, shared by the kernels' random fills
// (kernels/cpu/factory.cpp, kernels/cuda/factory.cu, dropout) and data/'s transforms and shuffles.
// Internal: not installed (runtime/CMakeLists.txt). Header-only, usable in CUDA device code: under nvcc the
// functions are __host__ __device__ (VOLT_PHILOX_HD, the same marking as kernels/common/macros.h's VOLT_HD, which
// this runtime header cannot include).
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define VOLT_PHILOX_HD __host__ __device__ __forceinline__
#else
#define VOLT_PHILOX_HD inline
#endif

namespace volt::philox {

struct U4 {
  uint32_t x[4];
};

VOLT_PHILOX_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// counter: 128 bits as (c0..c3); key: 64 bits (the seed).
VOLT_PHILOX_HD U4 philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t seed) {
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
VOLT_PHILOX_HD float uniform(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }
// Uniform double in [0, 1) from 53 random bits.
VOLT_PHILOX_HD double uniform64(uint32_t a, uint32_t b) {
  uint64_t v = (static_cast<uint64_t>(a) << 21) ^ static_cast<uint64_t>(b >> 11);
  return static_cast<double>(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Element i of a stream of uniform floats starting at 128-bit counter `offset`: each counter yields four
// numbers, so element i uses counter offset + i/4, lane i%4.
VOLT_PHILOX_HD float uniform_at(uint64_t seed, uint64_t offset, uint64_t i) {
  U4 r = philox4x32_10(offset + i / 4, 0, seed);
  return uniform(r.x[i % 4]);
}

// ---- bit-identical transcendental functions ------------------------------------------------------------------
// libm's logf/cosf and CUDA's differ in the last bits, so the normal transform uses its own: only integer
// operations, IEEE-rounded + - * / and sqrt, and explicit fused multiply-adds (never a*b+c, which one compiler
// might contract and the other not). Every step rounds the same way on the CPU and the GPU.

VOLT_PHILOX_HD float mad(float a, float b, float c) { return ::fmaf(a, b, c); }
VOLT_PHILOX_HD double mad(double a, double b, double c) { return ::fma(a, b, c); }

VOLT_PHILOX_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
VOLT_PHILOX_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// Natural log of a positive, normal float (Cephes' single-precision logf: within 1-2 ulp of the exact value).
VOLT_PHILOX_HD float repro_log(float x) {
  const uint32_t bits = float_bits(x);
  int e = static_cast<int>((bits >> 23) & 0xffu) - 126;           // x = m * 2^e, m in [0.5, 1)
  float m = bits_float((bits & 0x007fffffu) | 0x3f000000u);
  if (m < 0.707106781186547524f) {
    e -= 1;
    m = m + m - 1.0f;  // exact: m in [0.5, 0.707) -> 2m - 1 in [0, 0.414)
  } else {
    m = m - 1.0f;  // exact (Sterbenz)
  }
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = mad(p, m, -1.1514610310e-1f);
  p = mad(p, m, 1.1676998740e-1f);
  p = mad(p, m, -1.2420140846e-1f);
  p = mad(p, m, 1.4249322787e-1f);
  p = mad(p, m, -1.6668057665e-1f);
  p = mad(p, m, 2.0000714765e-1f);
  p = mad(p, m, -2.4999993993e-1f);
  p = mad(p, m, 3.3333331174e-1f);
  float y = (p * m) * z;
  const float fe = static_cast<float>(e);
  y = mad(fe, -2.12194440e-4f, y);  // ln 2 = 0.693359375 - 2.12194440e-4 (split for exactness)
  y = mad(-0.5f, z, y);
  float r = m + y;
  r = mad(fe, 0.693359375f, r);
  return r;
}

// sin and cos of |x| <= pi/4 (Cephes' single-precision minimax polynomials).
VOLT_PHILOX_HD float sin_small(float x) {
  const float z = x * x;
  float p = -1.9515295891e-4f;
  p = mad(p, z, 8.3321608736e-3f);
  p = mad(p, z, -1.6666654611e-1f);
  return mad(p * z, x, x);
}
VOLT_PHILOX_HD float cos_small(float x) {
  const float z = x * x;
  float p = 2.443315711809948e-5f;
  p = mad(p, z, -1.388731625493765e-3f);
  p = mad(p, z, 4.166664568298827e-2f);
  return mad(p * z, z, mad(-0.5f, z, 1.0f));
}

// cos(2 pi u) for u in [0, 1): u*4 splits exactly into a quadrant q and a remainder r in [-0.5, 0.5].
VOLT_PHILOX_HD float cos_2pi(float u) {
  const float t = u * 4.0f;                    // exact
  const float q = static_cast<float>(static_cast<int>(t + 0.5f));  // nearest quadrant, 0..4 (t + 0.5 exact)
  const float r = t - q;                       // exact
  const float x = r * 1.57079632679489662f;    // (pi/2) r, |x| <= pi/4
  switch (static_cast<int>(q) & 3) {
    case 0: return cos_small(x);
    case 1: return -sin_small(x);
    case 2: return -cos_small(x);
    default: return sin_small(x);
  }
}

// Standard normal number i (Box-Muller on lanes (0,1) and (2,3) of counter offset + i/2). Bit-identical on
// the CPU and CUDA (see above).
VOLT_PHILOX_HD float normal_at(uint64_t seed, uint64_t offset, uint64_t i) {
  U4 r = philox4x32_10(offset + i / 2, 0, seed);
  uint32_t a = r.x[(i % 2) * 2], b = r.x[(i % 2) * 2 + 1];
  // (0, 1] in steps of 2^-24. The scale is written as an exact power of two: `1.0f / 16777217.0f` (which a
  // float-literal-first compiler reads as 2^-24) was folded by nvcc's device compiler as 1/16777217 rounded
  // once, 2^-24 (1 - 2^-24), which moved u1 by an ulp and the GPU's normals off the CPU's in the last bits.
  float u1 = (static_cast<float>(a >> 8) + 1.0f) * 0x1p-24f;
  float u2 = uniform(b);
  return ::sqrtf(-2.0f * repro_log(u1)) * cos_2pi(u2);
}

}  // namespace volt::philox

#undef VOLT_PHILOX_HD
