// to(dtype) conversions checked on exact bit patterns (round to nearest even, ties, subnormals, overflow,
// NaN), integer and bool conversions, printing, and the factory functions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "common/gradcheck.h"
#include <volt/kernels/math_ops.h>
#include <volt/kernels/ops.h>

using namespace volt;

namespace {

float f32_from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// The 16-bit patterns of a CPU f16/bf16 tensor.
std::vector<uint16_t> bits16(const Tensor& t) {
  Tensor c = t.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(c.data_ptr());
  return std::vector<uint16_t>(p, p + c.numel());
}

std::vector<uint16_t> to_bits(const std::vector<float>& values, DType dt) {
  return bits16(from_vector<float>(values).to(dt));
}

constexpr float kTwoM11 = 1.0f / 2048.0f;  // half an f16 ulp at 1.0
constexpr float kTwoM8 = 1.0f / 256.0f;    // half a bf16 ulp at 1.0

}  // namespace

TEST(CastF16, RoundToNearestEvenAtTies) {
  EXPECT_EQ(to_bits({1.0f, 1.0f + kTwoM11, 1.0f + 3 * kTwoM11, 1.0f + kTwoM11 + 1.0f / (1 << 20), -1.0f - kTwoM11},
                    DType::f16),
            (std::vector<uint16_t>{0x3C00, 0x3C00, 0x3C02, 0x3C01, 0xBC00}));
  // 2049 is a tie between 2048 and 2050 (f16 spacing 2 there): goes to the even mantissa, 2048.
  EXPECT_EQ(to_bits({2049.0f, 2051.0f}, DType::f16), (std::vector<uint16_t>{0x6800, 0x6802}));
}

TEST(CastF16, OverflowSubnormalsZerosAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  // 65504 is the largest half; 65519.99 still rounds down; 65520 is the tie with 65536 (even) -> inf.
  EXPECT_EQ(to_bits({65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, inf, -inf}, DType::f16),
            (std::vector<uint16_t>{0x7BFF, 0x7BFF, 0x7C00, 0x7C00, 0xFC00, 0x7C00, 0xFC00}));
  const float two_m24 = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(to_bits({two_m24, two_m24 / 2, two_m24 * 0.75f, two_m24 * 1.5f, two_m24 * 2.5f, std::ldexp(1.0f, -14),
                     -0.0f, 0.0f, std::ldexp(1.0f, -30)},
                    DType::f16),
            (std::vector<uint16_t>{0x0001, 0x0000, 0x0001, 0x0002, 0x0002, 0x0400, 0x8000, 0x0000, 0x0000}));
  uint16_t nan = to_bits({std::numeric_limits<float>::quiet_NaN()}, DType::f16)[0];
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(CastF16, BackToFloatIsExact) {
  Tensor h = from_vector<float>({std::ldexp(1.0f, -24), 65504.0f, 1.0f + 2 * kTwoM11, -2.5f}).to(DType::f16);
  EXPECT_EQ(h.to(DType::f32).to_vector<float>(),
            (std::vector<float>{std::ldexp(1.0f, -24), 65504.0f, 1.0f + 2 * kTwoM11, -2.5f}));
  float back = from_vector<float>({std::numeric_limits<float>::quiet_NaN()}).to(DType::f16).to(DType::f32).item<float>();
  EXPECT_TRUE(std::isnan(back));
}

TEST(CastBF16, RoundToNearestEvenAtBit16) {
  EXPECT_EQ(to_bits({1.0f, 1.0f + kTwoM8, 1.0f + 3 * kTwoM8, 1.0f + kTwoM8 + 1.0f / (1 << 20), -1.0f - 3 * kTwoM8},
                    DType::bf16),
            (std::vector<uint16_t>{0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xBF82}));
  // FLT_MAX rounds up past the largest bf16 (0x7F7F) into inf; subnormals round at bit 16 too.
  EXPECT_EQ(to_bits({std::numeric_limits<float>::max(), f32_from_bits(0x7F7F0000u), f32_from_bits(0x00010000u),
                     f32_from_bits(0x00008000u), f32_from_bits(0x00018000u), f32_from_bits(0x00008001u)},
                    DType::bf16),
            (std::vector<uint16_t>{0x7F80, 0x7F7F, 0x0001, 0x0000, 0x0002, 0x0001}));
  uint16_t nan = to_bits({f32_from_bits(0x7F800001u)}, DType::bf16)[0];  // a NaN whose payload is below bit 16
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0) << "a NaN must stay a NaN, not become inf";
}

TEST(CastF64, ToF32RoundsToNearestEven) {
  const double one = 1.0, t24 = std::ldexp(1.0, -24);
  Tensor f = from_vector<double>({one + t24, one + 3 * t24, 1e300, -1e300}).to(DType::f32);
  std::vector<float> v = f.to_vector<float>();
  EXPECT_EQ(std::bit_cast<uint32_t>(v[0]), 0x3F800000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(v[1]), 0x3F800002u);
  EXPECT_TRUE(std::isinf(v[2]) && v[2] > 0);
  EXPECT_TRUE(std::isinf(v[3]) && v[3] < 0);
  // f64 values representable in f32 reach f16/bf16 with the same rounding as from f32.
  EXPECT_EQ(bits16(from_vector<double>({1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048}).to(DType::f16)),
            (std::vector<uint16_t>{0x3C00, 0x3C02}));
  EXPECT_EQ(bits16(from_vector<double>({1.0 + 1.0 / 256, 1.0 + 3.0 / 256}).to(DType::bf16)),
            (std::vector<uint16_t>{0x3F80, 0x3F82}));
}

TEST(CastInt, TruncationBoolAndWideIntegers) {
  EXPECT_EQ(from_vector<float>({2.7f, -2.7f, 0.0f, 100.5f}).to(DType::i32).to_vector<int32_t>(),
            (std::vector<int32_t>{2, -2, 0, 100}));
  EXPECT_EQ(from_vector<double>({3.9, 255.0}).to(DType::u8).to_vector<uint8_t>(), (std::vector<uint8_t>{3, 255}));
  // int64 -> f32 rounds (2^24 + 1 is not representable: tie to even), -> f64 is exact up to 2^53.
  const int64_t big = (int64_t{1} << 24) + 1, huge = (int64_t{1} << 53) - 1;
  EXPECT_EQ(from_vector<int64_t>({big}).to(DType::f32).to_vector<float>()[0], 16777216.0f);
  EXPECT_EQ(from_vector<int64_t>({huge}).to(DType::f64).to_vector<double>()[0], static_cast<double>(huge));
  EXPECT_EQ(from_vector<int32_t>({-7}).to(DType::i64).to_vector<int64_t>()[0], -7);
  // Anything nonzero (NaN included) is true; bool converts back to 0/1.
  Tensor b = from_vector<float>({0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(), -0.0f}).to(DType::boolean);
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(b.to(DType::f32).to_vector<float>(), (std::vector<float>{0, 1, 1, 0}));
  EXPECT_EQ(from_vector<int64_t>({0, 5}).to(DType::boolean).to(DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1}));
  // 70000 overflows f16 (inf) even from an integer.
  EXPECT_EQ(bits16(from_vector<int64_t>({70000, 2049}).to(DType::f16)), (std::vector<uint16_t>{0x7C00, 0x6800}));
}

// int8: named, parsed, one byte, promoted (with uint8 to int32: neither holds the other), cast with the same
// wrap-around as the other integer types, and summed in int64 like them.
TEST(CastInt, Int8) {
  EXPECT_STREQ(dtype_name(DType::i8), "int8");
  EXPECT_EQ(parse_dtype("int8"), DType::i8);
  EXPECT_EQ(parse_dtype("i8"), DType::i8);
  EXPECT_EQ(itemsize(DType::i8), 1u);
  EXPECT_TRUE(is_integral(DType::i8));
  EXPECT_EQ(promote_types(DType::i8, DType::u8), DType::i32);
  EXPECT_EQ(promote_types(DType::u8, DType::i8), DType::i32);
  EXPECT_EQ(promote_types(DType::i8, DType::boolean), DType::i8);
  EXPECT_EQ(promote_types(DType::i8, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::i8, DType::f16), DType::f16);
  EXPECT_EQ(from_vector<float>({2.7f, -2.7f, 127.0f, -128.0f, 128.0f, 300.0f, -1.0f, std::nanf("")})
                .to(DType::i8)
                .to_vector<int8_t>(),
            (std::vector<int8_t>{2, -2, 127, -128, -128, 44, -1, 0}));
  Tensor a = from_vector<int8_t>({-100, 50, 100});
  EXPECT_EQ(a.dtype(), DType::i8);
  EXPECT_EQ(a.to(DType::f32).to_vector<float>(), (std::vector<float>{-100, 50, 100}));
  EXPECT_EQ((a + a).to_vector<int8_t>(), (std::vector<int8_t>{56, 100, -56}));  // wraps, as int8 arithmetic does
  Tensor s = sum(a, {0}, false);
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.item<int64_t>(), 50);
  EXPECT_EQ((a + from_vector<uint8_t>({1, 2, 3})).dtype(), DType::i32);
  EXPECT_EQ((a + from_vector<uint8_t>({1, 2, 3})).to_vector<int32_t>(), (std::vector<int32_t>{-99, 52, 103}));
  Tensor r = randint(-128, 128, {1000}, DType::i8, kCPU);
  for (int8_t v : r.to_vector<int8_t>()) EXPECT_TRUE(v >= -128 && v <= 127);
  VOLT_EXPECT_ERROR(randint(-129, 0, {1}, DType::i8, kCPU), "does not fit in dtype int8", "values -128 to 127");
}

// C++ leaves NaN and out-of-range float -> integer conversions undefined (x86 and GPUs disagree); Volt defines
// them: NaN is 0, values truncate and clamp to the int64 range, then wrap into the narrower type.
TEST(CastInt, NaNInfinityAndOutOfRangeAreDefined) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x = from_vector<float>({nan, inf, -inf, -1.0f, 300.7f, -300.7f, 3e9f, 1e20f, -1e20f});
  const int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(x.to(DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, kMax, kMin, -1, 300, -300, 3000000000LL, kMax, kMin}));
  EXPECT_EQ(x.to(DType::i32).to_vector<int32_t>(),
            (std::vector<int32_t>{0, -1, 0, -1, 300, -300, static_cast<int32_t>(3000000000LL), -1, 0}));
  EXPECT_EQ(x.to(DType::u8).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 255, 0, 255, 44, 212, 0, 255, 0}));
  // The same through f64, f16 and bf16 inputs (f16 overflows 300.7 -> 300.75 and 3e9 -> inf).
  EXPECT_EQ(from_vector<double>({std::nan(""), -1.5, 1e300}).to(DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, -1, kMax}));
  EXPECT_EQ(x.to(DType::f16).to(DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, kMax, kMin, -1, 300, -300, kMax, kMax, kMin}));
  EXPECT_EQ(x.to(DType::bf16).to(DType::u8).to_vector<uint8_t>()[0], 0);
}

TEST(CastGeneral, StridedInputAndGradientBetweenFloatTypes) {
  Tensor a = from_vector<float>({1.5f, 2.5f, 3.5f, 4.5f}, {2, 2}).t();
  EXPECT_EQ(a.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 2, 4}));
  EXPECT_TRUE(a.to(DType::f32).is_same(a));  // same dtype: no copy
  Tensor x = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor y = x.to(DType::f32) * 2.0;
  EXPECT_EQ(y.dtype(), DType::f32);
  y.sum().backward();
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
  Tensor z = x.detach().set_requires_grad().to(DType::i64);
  EXPECT_FALSE(z.requires_grad());  // integer results carry no gradient
}

// ---- printing ---------------------------------------------------------------------------------------------

TEST(Printing, StrShowsValuesShapeDtype) {
  std::string s = from_vector<float>({1.5f, -2, 3, 4}, {2, 2}).str();
  EXPECT_NE(s.find("1.5"), std::string::npos) << s;
  EXPECT_NE(s.find("-2"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=(2, 2)"), std::string::npos) << s;
  EXPECT_NE(s.find("float32"), std::string::npos) << s;
  std::string i = from_vector<int64_t>({7, 8}).str();
  EXPECT_NE(i.find("[7, 8]"), std::string::npos) << i;
  EXPECT_NE(i.find("int64"), std::string::npos) << i;
  Tensor g = from_vector<double>({1}).set_requires_grad();
  EXPECT_NE((g * 2.0).str().find("grad_fn=Mul"), std::string::npos) << (g * 2.0).str();
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
}

TEST(Printing, LongDimsAreElided) {
  std::string s = arange(20).str();
  EXPECT_NE(s.find("..."), std::string::npos) << s;
  EXPECT_NE(s.find("[0, 1, 2, 3, 4, 5, ..., 14, 15, 16, 17, 18, 19]"), std::string::npos) << s;
  EXPECT_EQ(s.find("10"), std::string::npos) << s;
}

// ---- factories --------------------------------------------------------------------------------------------

TEST(Factories, ConstantFills) {
  EXPECT_EQ(zeros({2, 2}).to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(ones({3}, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1}));
  Tensor f = full({2}, 2.5, DType::f64);
  EXPECT_EQ(f.dtype(), DType::f64);
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  Tensor like = full_like(from_vector<int64_t>({1, 2, 3}), 9);
  EXPECT_EQ(like.dtype(), DType::i64);
  EXPECT_EQ(like.to_vector<int64_t>(), (std::vector<int64_t>{9, 9, 9}));
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  EXPECT_EQ(scalar_tensor(4.0).dim(), 0);
  EXPECT_EQ(scalar_tensor(4.0).item(), 4.0);
}

TEST(Factories, Arange) {
  EXPECT_EQ(arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), DType::i64);
  EXPECT_EQ(arange(1.0, 2.0, 0.25, DType::f32).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(5.0, 0.0, -2.0).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(arange(3.0, 3.0).numel(), 0);
  VOLT_EXPECT_ERROR(arange(0.0, 1.0, 0.0), "arange", "step");
}

TEST(Factories, FromVectorAndRandomRanges) {
  Tensor v = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(v.dtype(), DType::i32);
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  EXPECT_EQ(v.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  VOLT_EXPECT_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "from_vector", "3 values", "(2, 2)");
  Generator g(7);
  std::vector<double> r = rand({1000}, DType::f64, kCPU, &g, -2.0, 3.0).to_vector<double>();
  for (double x : r) {
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 3.0);
  }
  VOLT_EXPECT_ERROR(rand({2}, DType::i64), "rand", "int64");
}

TEST(Casts, Float64ToHalfRoundsOnce) {
  // 1 + 2^-11 + 2^-40 lies just above the f16 halfway point between 1 and 1 + 2^-10: it must round up.
  // Going through f32 first would land exactly on the halfway point and round (to even) down.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor h = from_vector<double>({x, -x}).to(DType::f16).to(DType::f64);
  EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{1.0 + std::ldexp(1.0, -10), -1.0 - std::ldexp(1.0, -10)}));
  const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);  // the same for bf16 (8-bit mantissa)
  Tensor b = from_vector<double>({y}).to(DType::bf16).to(DType::f64);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1.0 + std::ldexp(1.0, -7)}));
  // Exact and halfway cases still round to nearest even.
  Tensor e = from_vector<double>({1.0 + std::ldexp(1.0, -11), 65520.0, 1e-9}).to(DType::f16).to(DType::f64);
  EXPECT_EQ(e.to_vector<double>()[0], 1.0);
  EXPECT_TRUE(std::isinf(e.to_vector<double>()[1]));
  EXPECT_EQ(e.to_vector<double>()[2], 0.0);
}
