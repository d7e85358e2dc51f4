#pragma once
// 16-bit floating types stored as bit patterns. Conversions round to nearest, ties to even, and keep
// NaN/Inf; arithmetic on them goes through float (acc_type).
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <cstring>

#include <volt/kernels/common/macros.h>

namespace volt {

namespace detail {
VOLT_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
VOLT_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

VOLT_HD uint16_t float_to_half_bits(float f) {
  uint32_t x = detail::f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));  // Inf / NaN
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to Inf
  if (e <= 0) {                                               // subnormal half or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half_m = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1u))) half_m++;
    return static_cast<uint16_t>(sign | half_m);
  }
  uint32_t half_m = mant >> 13;
  uint32_t rem = mant & 0x1fffu;
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | half_m;
  if (rem > 0x1000u || (rem == 0x1000u && (half_m & 1u))) h++;  // may carry into the exponent: correct
  return static_cast<uint16_t>(h);
}

VOLT_HD float half_bits_to_float(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return detail::bits_f32(out);
}

VOLT_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t x = detail::f32_bits(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

VOLT_HD float bf16_bits_to_float(uint16_t b) { return detail::bits_f32(static_cast<uint32_t>(b) << 16); }

// double -> float rounded to odd (truncate, then set the last bit if anything was lost). Rounding that float
// to nearest-even in a much narrower format (f16, bf16) then equals rounding the double directly: no double
// rounding.
VOLT_HD float double_to_float_round_odd(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x || x != x) return f;
  uint32_t b = detail::f32_bits(f);
  if (::fabs(static_cast<double>(f)) > ::fabs(x)) b -= 1;  // step toward zero: now the truncation of x
  return detail::bits_f32(b | 1u);
}

struct Half {
  uint16_t bits = 0;
  Half() = default;
  VOLT_HD Half(float f) : bits(float_to_half_bits(f)) {}  // NOLINT
  static VOLT_HD Half from_double(double x) { return Half(double_to_float_round_odd(x)); }
  VOLT_HD operator float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  VOLT_HD BFloat16(float f) : bits(float_to_bf16_bits(f)) {}  // NOLINT
  static VOLT_HD BFloat16 from_double(double x) { return BFloat16(double_to_float_round_odd(x)); }
  VOLT_HD operator float() const { return bf16_bits_to_float(bits); }
};

// The type arithmetic on T is carried out in.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <> struct acc_type<bool> { using type = int64_t; };
template <> struct acc_type<uint8_t> { using type = int64_t; };
template <> struct acc_type<int8_t> { using type = int64_t; };
template <> struct acc_type<int32_t> { using type = int64_t; };
template <class T> using acc_t = typename acc_type<T>::type;

// A double rounded once to T (f16/bf16: no double -> float -> half double rounding), as the f64 -> T cast does.
template <class T>
VOLT_HD T from_f64(double x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T::from_double(x);
  else return static_cast<T>(x);
}

}  // namespace volt
