// .npz archives: the writer's round trip (stored and deflated), archives laid out the way Python's zipfile
// writes them for np.savez (zip64 local headers, deflate made here with zlib, data descriptors, comments), and
// corrupt or unsupported archives with their error messages.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <string>

#include "common/gradcheck.h"
#include <volt/data/npy.h>
#include <volt/data/npz.h>
#include "data/temp_dir.h"

namespace volt::data {
namespace {

using testing::TempDir;

void put16(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}
void put64(std::string& s, uint64_t v) {
  put32(s, static_cast<uint32_t>(v));
  put32(s, static_cast<uint32_t>(v >> 32));
}
uint32_t get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int b = 3; b >= 0; --b) v = (v << 8) | static_cast<uint8_t>(s[at + static_cast<size_t>(b)]);
  return v;
}
void set16(std::string& s, size_t at, uint32_t v) {
  s[at] = static_cast<char>(v & 0xff);
  s[at + 1] = static_cast<char>((v >> 8) & 0xff);
}
void set32(std::string& s, size_t at, uint32_t v) {
  set16(s, at, v & 0xffff);
  set16(s, at + 2, v >> 16);
}

std::string raw_deflate(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Member {
  std::string name;
  std::string data;        // uncompressed
  bool deflate = false;
  bool zip64_local = true;  // sizes 0xffffffff + a zip64 extra in the local header, as np.savez writes
  bool descriptor = false;  // sizes 0 in the local header, a data descriptor after the data
};

// A zip archive built independently of the reader under test, the way Python's zipfile lays one out.
std::string zip(const std::vector<Member>& members, const std::string& comment = "") {
  std::string out, central;
  for (const Member& m : members) {
    const std::string body = m.deflate ? raw_deflate(m.data) : m.data;
    const auto crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(m.data.data()),
                                                 static_cast<uInt>(m.data.size())));
    const uint32_t method = m.deflate ? 8 : 0, flags = m.descriptor ? 8 : 0;
    const auto offset = static_cast<uint32_t>(out.size());
    std::string extra;
    if (m.zip64_local) {
      put16(extra, 1);
      put16(extra, 16);
      put64(extra, m.data.size());
      put64(extra, body.size());
    }
    put32(out, 0x04034b50);
    put16(out, m.zip64_local ? 45 : 20);
    put16(out, flags);
    put16(out, method);
    put16(out, 0x6000);  // 12:00
    put16(out, 0x5a21);  // 2025-01-01
    put32(out, m.descriptor ? 0 : crc);
    put32(out, m.descriptor ? 0 : m.zip64_local ? 0xffffffffu : static_cast<uint32_t>(body.size()));
    put32(out, m.descriptor ? 0 : m.zip64_local ? 0xffffffffu : static_cast<uint32_t>(m.data.size()));
    put16(out, static_cast<uint32_t>(m.name.size()));
    put16(out, static_cast<uint32_t>(extra.size()));
    out += m.name + extra + body;
    if (m.descriptor) {
      put32(out, 0x08074b50);
      put32(out, crc);
      put32(out, static_cast<uint32_t>(body.size()));
      put32(out, static_cast<uint32_t>(m.data.size()));
    }
    put32(central, 0x02014b50);
    put16(central, 0x031e);  // made by: Unix, 3.0
    put16(central, 20);
    put16(central, flags);
    put16(central, method);
    put16(central, 0x6000);
    put16(central, 0x5a21);
    put32(central, crc);
    put32(central, static_cast<uint32_t>(body.size()));
    put32(central, static_cast<uint32_t>(m.data.size()));
    put16(central, static_cast<uint32_t>(m.name.size()));
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put32(central, 0x81800000u);  // -rw-------
    put32(central, offset);
    central += m.name;
  }
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(members.size()));
  put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, cd_offset);
  put16(out, static_cast<uint32_t>(comment.size()));
  return out + comment;
}

// Offsets into zip() output without a comment: the end record and the first central directory entry.
size_t end_record(const std::string& z) { return z.size() - 22; }
size_t first_entry(const std::string& z) { return get32(z, end_record(z) + 16); }

void write_raw(const std::string& path, const std::string& b) { std::ofstream(path, std::ios::binary) << b; }
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Tensor xs() { return from_vector(std::vector<float>{0.5f, -1, 2, 3.25f, 4, -5}, {3, 2}); }
Tensor ys() { return from_vector(std::vector<int64_t>{2, 0, 1}); }

TEST(Npz, StoredAndCompressedRoundTrip) {
  TempDir dir;
  const std::map<std::string, Tensor> arrays = {
      {"x", xs()}, {"y", ys()}, {"mask", from_vector(std::vector<float>{1, 0, 1}).to(DType::boolean)},
      {"zeros", empty({1000}, DType::f64).fill_(0.0)}, {"scalar", scalar_tensor(7, DType::i32)}};
  for (bool compress : {false, true}) {
    SCOPED_TRACE(compress ? "compressed" : "stored");
    const std::string path = dir.file(compress ? "c.npz" : "s.npz");
    write_npz(path, arrays, compress);
    const auto r = read_npz(path);
    ASSERT_EQ(r.size(), arrays.size());
    for (const auto& [k, t] : arrays) {
      ASSERT_EQ(r.count(k), 1u) << k;
      EXPECT_EQ(r.at(k).dtype(), t.dtype()) << k;
      EXPECT_EQ(r.at(k).shape(), t.shape()) << k;
      EXPECT_EQ(r.at(k).to_vector<double>(), t.to_vector<double>()) << k;
    }
    EXPECT_EQ(npz_keys(path), (std::vector<std::string>{"mask", "scalar", "x", "y", "zeros"}));
    EXPECT_EQ(read_npz_array(path, "y").to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 1}));
    EXPECT_EQ(read_npz_array(path, "x.npy").to_vector<float>(), xs().to_vector<float>());
  }
  EXPECT_LT(read_all(dir.file("c.npz")).size() + 4000, read_all(dir.file("s.npz")).size())
      << "8000 zero bytes must deflate";
}

TEST(Npz, StoredArchiveIsAPlainZip) {
  TempDir dir;
  write_npz(dir.file("a.npz"), {{"x", xs()}});
  const std::string z = read_all(dir.file("a.npz"));
  const std::string npy = npy_bytes(xs());
  EXPECT_EQ(get32(z, 0), 0x04034b50u);
  EXPECT_EQ(z.substr(30, 5), "x.npy");
  EXPECT_EQ(z.substr(35, npy.size()), npy);
  EXPECT_EQ(get32(z, 14), static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(npy.data()),
                                                      static_cast<uInt>(npy.size()))));
  EXPECT_EQ(get32(z, end_record(z)), 0x06054b50u);
  EXPECT_EQ(first_entry(z), 35 + npy.size());
}

TEST(Npz, NumPyStyleArchivesWithZip64LocalHeadersAndDeflate) {
  TempDir dir;
  // np.savez_compressed(f, x=..., y=...) as Python's zipfile writes it, plus an archive comment.
  write_raw(dir.file("np.npz"), zip({{"x.npy", npy_bytes(xs()), true}, {"y.npy", npy_bytes(ys()), true}}, "hi"));
  const auto r = read_npz(dir.file("np.npz"));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.at("x").shape(), (Shape{3, 2}));
  EXPECT_EQ(r.at("x").to_vector<float>(), xs().to_vector<float>());
  EXPECT_EQ(r.at("y").to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 1}));
  // Stored and deflated members side by side, plain local headers, a data descriptor.
  write_raw(dir.file("mixed.npz"), zip({{"a.npy", npy_bytes(xs()), false, false},
                                        {"b.npy", npy_bytes(ys()), true, false, /*descriptor=*/true},
                                        {"c.npy", npy_bytes(ys()), false, true, true}}));
  const auto m = read_npz(dir.file("mixed.npz"));
  EXPECT_EQ(m.at("a").to_vector<float>(), xs().to_vector<float>());
  EXPECT_EQ(m.at("b").to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(m.at("c").to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 1}));
}

TEST(Npz, MissingKeyListsTheKeys) {
  TempDir dir;
  write_npz(dir.file("a.npz"), {{"x", xs()}, {"y", ys()}});
  VOLT_EXPECT_ERROR(read_npz_array(dir.file("a.npz"), "labels"), "a.npz", "no array 'labels'", "'x', 'y'");
  write_npz(dir.file("empty.npz"), {});
  EXPECT_TRUE(read_npz(dir.file("empty.npz")).empty());
  VOLT_EXPECT_ERROR(read_npz_array(dir.file("empty.npz"), "x"), "(none)");
}

TEST(Npz, NonNpyMembersAreRefusedByReadNpzButSkippableByKey) {
  TempDir dir;
  write_raw(dir.file("a.npz"), zip({{"x.npy", npy_bytes(xs())}, {"README.txt", "hello"}}));
  VOLT_EXPECT_ERROR(read_npz(dir.file("a.npz")), "member 'README.txt' is not a .npy file");
  EXPECT_EQ(read_npz_array(dir.file("a.npz"), "x").to_vector<float>(), xs().to_vector<float>());
  EXPECT_EQ(npz_keys(dir.file("a.npz")), (std::vector<std::string>{"x", "README.txt"}));
}

TEST(Npz, BadMemberContentsNameTheMember) {
  TempDir dir;
  write_raw(dir.file("a.npz"), zip({{"x.npy", "not numpy at all"}}));
  VOLT_EXPECT_ERROR(read_npz(dir.file("a.npz")), "a.npz[x.npy]", "not a .npy file");
}

TEST(Npz, NotAZipOrMissing) {
  TempDir dir;
  write_npy(dir.file("x.npy"), xs());
  VOLT_EXPECT_ERROR(read_npz(dir.file("x.npy")), "x.npy", "not a zip archive", "end-of-central-directory");
  write_raw(dir.file("tiny.npz"), "PK");
  VOLT_EXPECT_ERROR(read_npz(dir.file("tiny.npz")), "not a zip archive");
  VOLT_EXPECT_ERROR(read_npz(dir.file("nope.npz")), "cannot open", "nope.npz");
  // Cut in half: the end record is gone.
  write_npz(dir.file("a.npz"), {{"x", xs()}});
  const std::string z = read_all(dir.file("a.npz"));
  write_raw(dir.file("half.npz"), z.substr(0, z.size() / 2));
  VOLT_EXPECT_ERROR(read_npz(dir.file("half.npz")), "not a zip archive");
}

TEST(Npz, CorruptDataIsCaughtByTheCrc) {
  TempDir dir;
  std::string z = zip({{"x.npy", npy_bytes(xs()), false, false}});
  z[first_entry(z) - 1] ^= 0x40;  // last data byte of the only member
  write_raw(dir.file("a.npz"), z);
  VOLT_EXPECT_ERROR(read_npz(dir.file("a.npz")), "a.npz", "corrupt", "member 'x.npy' has CRC-32", "archive records");
  std::string d = zip({{"x.npy", npy_bytes(xs()), true, false}});
  d[30 + 5 + 3] ^= 0x55;  // inside the deflate stream
  write_raw(dir.file("d.npz"), d);
  VOLT_EXPECT_ERROR(read_npz(dir.file("d.npz")), "d.npz", "corrupt", "member 'x.npy'");
}

TEST(Npz, InconsistentSizesAreRejected) {
  TempDir dir;
  const std::string good = zip({{"x.npy", npy_bytes(xs()), true, false}});
  std::string big = good;
  set32(big, first_entry(big) + 24, get32(big, first_entry(big) + 24) + 10);  // uncompressed size + 10
  write_raw(dir.file("big.npz"), big);
  VOLT_EXPECT_ERROR(read_npz(dir.file("big.npz")), "member 'x.npy' inflates to", "but declares");
  std::string small = good;
  set32(small, first_entry(small) + 24, get32(small, first_entry(small) + 24) - 10);
  write_raw(dir.file("small.npz"), small);
  VOLT_EXPECT_ERROR(read_npz(dir.file("small.npz")), "member 'x.npy' does not inflate to its declared",
                    "more output than declared");
  std::string bomb = good;
  set32(bomb, first_entry(bomb) + 24, 0xfffffff0u);
  write_raw(dir.file("bomb.npz"), bomb);
  VOLT_EXPECT_ERROR(read_npz(dir.file("bomb.npz")), "declares 4294967280 uncompressed bytes",
                    "more than deflate can produce");
  std::string past = good;
  set32(past, first_entry(past) + 20, 100000);  // compressed size beyond the file
  write_raw(dir.file("past.npz"), past);
  VOLT_EXPECT_ERROR(read_npz(dir.file("past.npz")), "truncated or corrupt", "the data of member 'x.npy'",
                    "beyond the end");
  std::string stored = zip({{"x.npy", npy_bytes(xs()), false, false}});
  set32(stored, first_entry(stored) + 24, 5);
  write_raw(dir.file("stored.npz"), stored);
  VOLT_EXPECT_ERROR(read_npz(dir.file("stored.npz")), "stored member 'x.npy'", "declares 5 uncompressed bytes");
  std::string local = good;
  local[0] = 'X';
  write_raw(dir.file("local.npz"), local);
  VOLT_EXPECT_ERROR(read_npz(dir.file("local.npz")), "no local header at offset 0");
  std::string cd = good;
  set32(cd, end_record(cd) + 12, 4000);  // central directory size past the end record
  write_raw(dir.file("cd.npz"), cd);
  VOLT_EXPECT_ERROR(read_npz(dir.file("cd.npz")), "central directory", "overlaps or passes the end record");
  std::string count = good;
  set16(count, end_record(count) + 8, 2);
  set16(count, end_record(count) + 10, 2);
  write_raw(dir.file("count.npz"), count);
  VOLT_EXPECT_ERROR(read_npz(dir.file("count.npz")), "central directory entry 1 of 2 is truncated");
}

TEST(Npz, UnsupportedArchivesAreRefusedClearly) {
  TempDir dir;
  const std::string good = zip({{"x.npy", npy_bytes(xs())}});
  std::string z64 = good;
  set16(z64, end_record(z64) + 8, 0xffff);
  set16(z64, end_record(z64) + 10, 0xffff);
  write_raw(dir.file("z64.npz"), z64);
  VOLT_EXPECT_ERROR(read_npz(dir.file("z64.npz")), "z64.npz", "zip64 archive", "not supported");
  std::string enc = good;
  set16(enc, first_entry(enc) + 8, 1);
  write_raw(dir.file("enc.npz"), enc);
  VOLT_EXPECT_ERROR(read_npz(dir.file("enc.npz")), "member 'x.npy' is encrypted");
  std::string bz = good;
  set16(bz, first_entry(bz) + 10, 12);
  write_raw(dir.file("bz.npz"), bz);
  VOLT_EXPECT_ERROR(read_npz(dir.file("bz.npz")), "compression method 12", "0 (stored) and 8 (deflate)");
  std::string disk = good;
  set16(disk, end_record(disk) + 4, 1);
  write_raw(dir.file("disk.npz"), disk);
  VOLT_EXPECT_ERROR(read_npz(dir.file("disk.npz")), "multi-disk");
  std::string big = good;  // a 32-bit size of 0xffffffff without the zip64 extra that must carry the real one
  set32(big, first_entry(big) + 20, 0xffffffffu);
  write_raw(dir.file("big.npz"), big);
  VOLT_EXPECT_ERROR(read_npz(dir.file("big.npz")), "0xffffffff but no zip64 extra field");
  write_raw(dir.file("dup.npz"), zip({{"x.npy", npy_bytes(xs())}, {"x.npy", npy_bytes(ys())}}));
  VOLT_EXPECT_ERROR(read_npz(dir.file("dup.npz")), "two members named 'x.npy'");
}

TEST(Npz, WriterChecksKeysAndPaths) {
  TempDir dir;
  VOLT_EXPECT_ERROR(write_npz(dir.file("a.npz"), {{"", xs()}}), "key ''", "non-empty");
  VOLT_EXPECT_ERROR(write_npz(dir.file("no/dir/a.npz"), {{"x", xs()}}), "cannot create", "no/dir/a.npz");
  VOLT_EXPECT_ERROR(write_npz(dir.file("b.npz"), {{"x", empty({2}, DType::bf16)}}), "bf16");
}

}  // namespace
}  // namespace volt::data
