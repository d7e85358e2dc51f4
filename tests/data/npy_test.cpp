// .npy reader and writer: round trips over every dtype, version, byte order and layout; byte-exact fixtures
// as NumPy writes them (big-endian, Fortran order, the widened dtypes, old headers); every kind of broken
// file with its error message.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "common/gradcheck.h"
#include <volt/data/npy.h>
#include "data/temp_dir.h"

namespace volt::data {
namespace {

using testing::TempDir;

// .npy bytes laid out as NumPy lays them out: magic, version, little-endian header length, the dict padded
// with spaces and a newline so the data starts on a multiple of `align`, then `data`.
std::string npy(const std::string& dict, const std::string& data, int major = 1, size_t align = 64) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t pre = 8 + len_bytes;
  const size_t len = (pre + dict.size() + 1 + align - 1) / align * align - pre;
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (size_t b = 0; b < len_bytes; ++b) out.push_back(static_cast<char>((len >> (8 * b)) & 0xff));
  return out + dict + std::string(len - dict.size() - 1, ' ') + "\n" + data;
}

std::string dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape +
         ", }";
}

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int v : b) s.push_back(static_cast<char>(v));
  return s;
}

void write_raw(const std::string& path, const std::string& b) { std::ofstream(path, std::ios::binary) << b; }

Tensor parse(const std::string& b) { return parse_npy(b, "fixture.npy"); }

// Values (i * 37 % 23) - 11 in every dtype: negatives for the signed and float types, 0..255 for u8, and both
// 0 and 1 for boolean.
Tensor pattern(const Shape& shape, DType dtype) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const auto x = static_cast<float>(static_cast<int>(i * 37 % 23) - 11);
    v[i] = dtype == DType::u8 ? static_cast<float>(i * 53 % 256) : dtype == DType::boolean ? (x > 0 ? 1.f : 0.f)
                                                                                           : x * 0.5f;
  }
  if (is_integral(dtype) && dtype != DType::u8 && dtype != DType::boolean)
    for (auto& x : v) x = static_cast<float>(static_cast<int>(x * 2));
  return from_vector(v, shape).to(dtype);
}

TEST(Npy, WriterMatchesNumPyBytesExactly) {
  // np.save(f, np.array([1, 2, 3], dtype="<i4")) writes exactly these 128 + 12 bytes: 10 of preamble, a 57-byte
  // dict, 60 spaces and a newline.
  const std::string expected = std::string("\x93NUMPY\x01\x00v\x00", 10) +
                               "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }" + std::string(60, ' ') +
                               "\n" + bytes({1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0});
  EXPECT_EQ(npy_bytes(from_vector(std::vector<int32_t>{1, 2, 3})), expected);
  // np.save of np.float64(2.5) (0-d) and of a (2, 0) float32 array.
  EXPECT_EQ(npy_bytes(scalar_tensor(2.5, DType::f64)),
            npy(dict("<f8", "()"), bytes({0, 0, 0, 0, 0, 0, 4, 0x40})));
  EXPECT_EQ(npy_bytes(empty({2, 0})), npy(dict("<f4", "(2, 0)"), ""));
  EXPECT_EQ(npy_bytes(from_vector(std::vector<uint8_t>{7}, {1, 1})), npy(dict("|u1", "(1, 1)"), "\x07"));
}

TEST(Npy, RoundTripEveryDtypeVersionByteOrderAndLayout) {
  TempDir dir;
  for (DType dt : {DType::f16, DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::i8, DType::boolean})
    for (int version : {1, 2, 3})
      for (bool big : {false, true})
        for (bool fortran : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " v" + std::to_string(version) + (big ? " big" : " little") +
                       (fortran ? " fortran" : " C"));
          const Tensor t = pattern({2, 3, 4}, dt);
          const std::string path = dir.file("a.npy");
          write_npy(path, t, {.version = version, .big_endian = big, .fortran_order = fortran});
          const Tensor r = read_npy(path);
          EXPECT_EQ(r.dtype(), dt);
          EXPECT_EQ(r.shape(), (Shape{2, 3, 4}));
          EXPECT_EQ(r.to_vector<double>(), t.to_vector<double>());
          const std::string b = npy_bytes(t, {.version = version, .big_endian = big, .fortran_order = fortran});
          EXPECT_EQ(static_cast<int>(b[6]), version);
          EXPECT_EQ((b.size() - t.nbytes()) % 64, 0u) << "data must start on a 64-byte boundary";
          EXPECT_EQ(parse(b).to_vector<double>(), t.to_vector<double>());
        }
}

TEST(Npy, RoundTripOddShapes) {
  TempDir dir;
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{5}, Shape{3, 0, 2}, Shape{1, 1, 1, 1, 1, 7}}) {
    SCOPED_TRACE(shape_to_string(shape));
    const Tensor t = pattern(shape, DType::f32);
    write_npy(dir.file("s.npy"), t, {.fortran_order = true});
    const Tensor r = read_npy(dir.file("s.npy"));
    EXPECT_EQ(r.shape(), shape);
    EXPECT_EQ(r.to_vector<float>(), t.to_vector<float>());
  }
}

TEST(Npy, NonContiguousTensorsAreWrittenInLogicalOrder) {
  const Tensor t = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).t();  // (3, 2) view
  const Tensor r = parse(npy_bytes(t));
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Npy, BigEndianFixtures) {
  // np.array([1.5, -2.0], dtype='>f4'), np.array([-2, 258], dtype='>i8'), np.array([1.0], dtype='>f2').
  Tensor f = parse(npy(dict(">f4", "(2,)"), bytes({0x3f, 0xc0, 0, 0, 0xc0, 0, 0, 0})));
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  Tensor i = parse(npy(dict(">i8", "(2,)"), bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0, 0, 0,
                                                   1, 2})));
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{-2, 258}));
  Tensor h = parse(npy(dict(">f2", "(1,)"), bytes({0x3c, 0x00})));
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.0f}));
  Tensor d = parse(npy(dict(">f8", "()"), bytes({0xc0, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18})));
  EXPECT_EQ(d.dim(), 0);
  EXPECT_DOUBLE_EQ(d.item(), -3.141592653589793);
}

TEST(Npy, FortranOrderFixtureIsReturnedRowMajor) {
  // np.asfortranarray([[1, 2, 3], [4, 5, 6]], dtype='<i4'): the elements are stored column by column.
  Tensor t = parse(npy(dict("<i4", "(2, 3)", /*fortran=*/true),
                       bytes({1, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0, 0})));
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  // (2, 2, 2) column-major: element [i][j][k] sits at i + 2j + 4k.
  std::string data;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 2; ++i) data.push_back(static_cast<char>(100 * i + 10 * j + k));
  Tensor u = parse(npy(dict("|u1", "(2, 2, 2)", true), data));
  EXPECT_EQ(u.to_vector<int>(), (std::vector<int>{0, 1, 10, 11, 100, 101, 110, 111}));
}

TEST(Npy, NarrowAndUnsignedIntegersAreWidenedExactly) {
  Tensor i1 = parse(npy(dict("|i1", "(3,)"), bytes({0xff, 0x7f, 0x80})));
  EXPECT_EQ(i1.dtype(), DType::i8);  // int8 is read as int8 (no widening)
  EXPECT_EQ(i1.to_vector<int8_t>(), (std::vector<int8_t>{-1, 127, -128}));
  Tensor i2 = parse(npy(dict(">i2", "(2,)"), bytes({0xff, 0xfe, 0x80, 0x00})));
  EXPECT_EQ(i2.dtype(), DType::i32);
  EXPECT_EQ(i2.to_vector<int>(), (std::vector<int>{-2, -32768}));
  Tensor i2le = parse(npy(dict("<i2", "(1,)"), bytes({0x39, 0x30})));
  EXPECT_EQ(i2le.to_vector<int>(), (std::vector<int>{12345}));
  Tensor u2 = parse(npy(dict("<u2", "(2,)"), bytes({0xff, 0xff, 0x01, 0x00})));
  EXPECT_EQ(u2.dtype(), DType::i32);
  EXPECT_EQ(u2.to_vector<int>(), (std::vector<int>{65535, 1}));
  Tensor u4 = parse(npy(dict(">u4", "(2,)"), bytes({0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0})));
  EXPECT_EQ(u4.dtype(), DType::i64);
  EXPECT_EQ(u4.to_vector<int64_t>(), (std::vector<int64_t>{4294967295LL, 256}));
  Tensor u1 = parse(npy(dict("|u1", "(2,)"), bytes({0xff, 0})));
  EXPECT_EQ(u1.dtype(), DType::u8);
  EXPECT_EQ(u1.to_vector<int>(), (std::vector<int>{255, 0}));
}

TEST(Npy, BoolBytesBecomeZeroOrOne) {
  Tensor b = parse(npy(dict("|b1", "(2, 2)"), bytes({0, 1, 2, 0xff})));
  EXPECT_EQ(b.dtype(), DType::boolean);
  const auto* p = static_cast<const uint8_t*>(b.data_ptr());
  EXPECT_EQ((std::vector<int>{p[0], p[1], p[2], p[3]}), (std::vector<int>{0, 1, 1, 1}));
}

TEST(Npy, OlderAndHandWrittenHeadersAreAccepted) {
  // NumPy < 1.17 padded to 16 bytes; Python 2 NumPy wrote long literals (2L); keys may come in any order and
  // use double quotes; version 2.0 and 3.0 have a 4-byte header length.
  const std::string data = bytes({0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40});
  EXPECT_EQ(parse(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }", data, 1, 16)).to_vector<double>(),
            (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(parse(npy("{\"shape\": (1, 2), \"descr\": \"<f8\", \"fortran_order\": False}", data)).shape(),
            (Shape{1, 2}));
  EXPECT_EQ(parse(npy(dict("<f8", "(2,)"), data, 2)).to_vector<double>(), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(parse(npy(dict("=f8", "(2,)"), data, 3)).to_vector<double>(), (std::vector<double>{1.0, 2.0}));
}

TEST(Npy, MissingFileNamesThePath) {
  TempDir dir;
  VOLT_EXPECT_ERROR(read_npy(dir.file("nope.npy")), "cannot open", "nope.npy");
}

TEST(Npy, BadMagicAndVersionAreRejected) {
  TempDir dir;
  write_raw(dir.file("zip.npy"), "PK\x03\x04 this is a zip");
  VOLT_EXPECT_ERROR(read_npy(dir.file("zip.npy")), "zip.npy", "not a .npy file", "'PK\\x03\\x04 t'", "\\x93NUMPY");
  std::string v4 = npy(dict("<f4", "(1,)"), "abcd");
  v4[6] = 4;
  VOLT_EXPECT_ERROR(parse(v4), "fixture.npy", "format version 4.0", "1.0, 2.0 and 3.0");
  std::string minor = npy(dict("<f4", "(1,)"), "abcd");
  minor[7] = 1;
  VOLT_EXPECT_ERROR(parse(minor), "format version 1.1");
  VOLT_EXPECT_ERROR(parse(""), "not a .npy file");
}

TEST(Npy, TruncatedHeadersAreRejected) {
  TempDir dir;
  const std::string good = npy(dict("<f4", "(1,)"), "abcd");
  write_raw(dir.file("cut.npy"), good.substr(0, 40));
  VOLT_EXPECT_ERROR(read_npy(dir.file("cut.npy")), "cut.npy", "truncated", "header declares 118 bytes",
                    "ends at byte 128", "the file has 40 bytes");
  VOLT_EXPECT_ERROR(parse(good.substr(0, 7)), "truncated", "7 bytes", "version bytes");
  VOLT_EXPECT_ERROR(parse(good.substr(0, 9)), "truncated", "header length field");
  VOLT_EXPECT_ERROR(parse(std::string("\x93NUMPY\x02\x00\xff\xff", 10)), "header length field of format 2.0");
}

TEST(Npy, MalformedHeaderDictsAreRejectedWithTheText) {
  VOLT_EXPECT_ERROR(parse(npy("{'descr' '<f4', 'fortran_order': False, 'shape': (1,), }", "abcd")),
                    "malformed header", "expected ':'", "offset 9", "{'descr' '<f4'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", "abcd")),
                    "expected True or False for 'fortran_order'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': 1, }", "abcd")),
                    "expected a tuple of sizes for 'shape'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1 2), }", "abcd")),
                    "expected ',' or ')' in 'shape'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4, 'fortran_order': False}", "abcd")), "malformed header");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", "abcd")),
                    "unexpected text after the header dict");
  VOLT_EXPECT_ERROR(parse(npy("['descr']", "abcd")), "expected '{'", "offset 0");
}

TEST(Npy, MissingUnknownAndNegativeHeaderValuesAreRejected) {
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'fortran_order': False, }", "abcd")), "lacks the key 'shape'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'shape': (1,), }", "abcd")), "lacks the key 'fortran_order'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "abcd")),
                    "unknown header key 'extra'");
  VOLT_EXPECT_ERROR(parse(npy(dict("<f4", "(-1,)"), "abcd")), "negative dimension");
  VOLT_EXPECT_ERROR(parse(npy(dict("<f4", "(99999999999999999999,)"), "abcd")), "overflows 64 bits");
  // 2^32 * 2^32 elements wrap to 0 in 64-bit arithmetic: without a checked product this looked like an empty
  // array.
  VOLT_EXPECT_ERROR(parse(npy(dict("<f4", "(4294967296, 4294967296)"), "")), "element count overflows");
  VOLT_EXPECT_ERROR(parse(npy(dict("<f8", "(4611686018427387904,)"), "")), "byte count overflows");
}

TEST(Npy, UnsupportedDtypesAreRejectedByName) {
  VOLT_EXPECT_ERROR(parse(npy(dict("<u8", "(1,)"), std::string(8, '\0'))), "'<u8'", "uint64",
                    "astype(np.int64)");
  VOLT_EXPECT_ERROR(parse(npy(dict("<c8", "(1,)"), std::string(8, '\0'))), "unsupported dtype '<c8'",
                    "supported: f2 f4 f8");
  VOLT_EXPECT_ERROR(parse(npy(dict("|O", "(1,)"), std::string(8, '\0'))), "unsupported dtype '|O'");
  VOLT_EXPECT_ERROR(parse(npy(dict("<U5", "(1,)"), std::string(20, '\0'))), "unsupported dtype '<U5'");
  VOLT_EXPECT_ERROR(parse(npy(dict("f4", "(1,)"), "abcd")), "'f4'", "byte-order character");
  VOLT_EXPECT_ERROR(parse(npy(dict("<f4x", "(1,)"), "abcd")), "unsupported dtype '<f4x'");
  VOLT_EXPECT_ERROR(parse(npy("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,), }",
                              std::string(8, '\0'))),
                    "structured dtype");
}

TEST(Npy, DataSizeMismatchReportsBothCounts) {
  TempDir dir;
  const std::string trunc = npy(dict("<f4", "(2, 3)"), std::string(20, 'x'));
  write_raw(dir.file("t.npy"), trunc);
  VOLT_EXPECT_ERROR(read_npy(dir.file("t.npy")), "t.npy", "truncated", "shape (2, 3)", "'<f4'", "needs 24 data bytes",
                    "128-byte header", "has 20");
  VOLT_EXPECT_ERROR(parse(npy(dict("<f4", "(2,)"), std::string(12, 'x'))), "trailing bytes", "needs 8", "has 12");
}

TEST(Npy, WriterRefusesBf16AndBadOptions) {
  TempDir dir;
  VOLT_EXPECT_ERROR(write_npy(dir.file("b.npy"), empty({2}, DType::bf16)), "bf16", "DType::f32");
  VOLT_EXPECT_ERROR(npy_bytes(empty({2}), {.version = 4}), "version must be 0", "got 4");
  VOLT_EXPECT_ERROR(npy_bytes(Tensor()), "undefined");
  VOLT_EXPECT_ERROR(write_npy(dir.file("no/such/dir/x.npy"), empty({2})), "cannot create", "no/such/dir/x.npy");
}

}  // namespace
}  // namespace volt::data
