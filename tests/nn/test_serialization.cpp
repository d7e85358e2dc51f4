// safetensors files and atomic writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("volt_nn_ser_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t count() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), fs::directory_iterator())); }
};

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

nn::StateDict all_dtypes() {
  nn::StateDict sd;
  sd.emplace_back("f32", from_vector<float>({1.5f, -2.25f, 3, 4, 5, 6}, {2, 3}));
  sd.emplace_back("f64", from_vector<double>({3.141592653589793, -1e-300}, {2}));
  sd.emplace_back("f16", from_vector<float>({0.5f, -1.0f, 65504.0f}, {3}).to(DType::f16));
  sd.emplace_back("bf16", from_vector<float>({1.0f, -3.0f, 0.0078125f}, {3, 1}).to(DType::bf16));
  sd.emplace_back("i64", from_vector<int64_t>({int64_t(1) << 40, -7}, {2}));
  sd.emplace_back("i32", from_vector<int32_t>({-5, 7, 9}, {1, 3}));
  sd.emplace_back("u8", from_vector<uint8_t>({0, 255}, {2}));
  sd.emplace_back("bool", from_vector<uint8_t>({1, 0, 1}).to(DType::boolean));
  sd.emplace_back("scalar", scalar_tensor(42.0));
  sd.emplace_back("empty", zeros({0, 4}));
  sd.emplace_back("strided", from_vector<float>({1, 2, 3, 4}, {2, 2}).t());  // saved contiguous
  sd.emplace_back("i8", from_vector<int8_t>({-128, -1, 0, 127}, {2, 2}));
  return sd;
}

}  // namespace

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  auto sd = all_dtypes();
  nn::save_safetensors(path, sd, {{"format", "pt"}, {"epoch", "3"}});
  std::map<std::string, std::string> meta;
  auto back = nn::load_safetensors(path, &meta);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"format", "pt"}, {"epoch", "3"}}));
  ASSERT_EQ(back.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    SCOPED_TRACE(sd[i].first);
    EXPECT_EQ(back[i].first, sd[i].first);  // order preserved
    EXPECT_EQ(back[i].second.dtype(), sd[i].second.dtype());
    EXPECT_EQ(back[i].second.shape(), sd[i].second.shape());
    EXPECT_EQ(back[i].second.to_vector<double>(), sd[i].second.to_vector<double>());
  }
  EXPECT_EQ(back[10].second.to_vector<float>(), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(back[11].second.to_vector<int8_t>(), (std::vector<int8_t>{-128, -1, 0, 127}));
  EXPECT_EQ(dir.count(), 1u);  // no temp file left behind
}

TEST(Safetensors, ByteLayout) {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  nn::StateDict sd{{"b", from_vector<float>({1, 2, 3}, {3})}, {"a", from_vector<int64_t>({5}, {1, 1})}};
  nn::save_safetensors(path, sd, {{"k", "v"}});
  const std::string bytes = read_all(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 12 + 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["k"], "v");
  EXPECT_EQ(header["b"]["dtype"], "F32");
  EXPECT_EQ(header["b"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(header["a"]["dtype"], "I64");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json::array({1, 1}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({12, 20}));
  float f[3];
  std::memcpy(f, bytes.data() + 8 + n, 12);
  EXPECT_EQ(f[2], 3.0f);
  int64_t v;
  std::memcpy(&v, bytes.data() + 8 + n + 12, 8);
  EXPECT_EQ(v, 5);
}

TEST(Safetensors, ReadsForeignHeaderOrder) {
  // Another writer may list tensors in any key order; offsets decide the layout.
  TempDir dir;
  const std::string path = dir.file("foreign.safetensors");
  std::string header = R"({"z":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"y":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  const char data[8] = {1, 2, 3, 4, 7, 0, 0, 0};
  bytes.append(data, 8);
  write_all(path, bytes);
  auto sd = nn::load_safetensors(path);
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "y");
  EXPECT_EQ(sd[0].second.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(sd[1].second.to_vector<int32_t>(), (std::vector<int32_t>{7}));
}

TEST(Safetensors, CorruptAndTruncatedFilesFailClearly) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  nn::save_safetensors(good, {{"w", from_vector<float>({1, 2, 3, 4}, {4})}});
  const std::string bytes = read_all(good);
  const std::string bad = dir.file("bad.safetensors");

  write_all(bad, bytes.substr(0, 5));
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "truncated", "bad.safetensors");
  write_all(bad, bytes.substr(0, 20));
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "header length");
  write_all(bad, bytes.substr(0, bytes.size() - 3));
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "'w'", "outside");
  write_all(bad, bytes + "xx");
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "cover 16 bytes", "18");
  std::string corrupt = bytes;
  corrupt[9] = '#';
  write_all(bad, corrupt);
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "corrupt JSON header");
  std::string dt = bytes;
  dt.replace(dt.find("F32"), 3, "F99");
  write_all(bad, dt);
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "F99");
  std::string shp = bytes;
  shp.replace(shp.find("[4]"), 3, "[5]");
  write_all(bad, shp);
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "spans 16 bytes", "needs 20");
  VOLT_EXPECT_ERROR(nn::load_safetensors(dir.file("missing.safetensors")), "cannot open");
  VOLT_EXPECT_ERROR(nn::save_safetensors(bad, {{"a", zeros({1})}, {"a", zeros({1})}}), "duplicate", "'a'");
}

// Writes a safetensors file from a raw JSON header and `data` bytes.
void write_safetensors_raw(const std::string& p, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  write_all(p, bytes + header + data);
}

TEST(Safetensors, HostileHeadersFailClearly) {
  TempDir dir;
  const std::string p = dir.file("h.safetensors");
  // [2^32, 2^32] of F32: 2^64 elements wrap to 0 bytes in unchecked arithmetic.
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "");
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "h.safetensors", "'w'", "[4294967296,4294967296]", "overflows");
  // 2^62 elements fit int64 but their bytes (x4) do not.
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", "");
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "'w'", "byte count overflows");
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", "abcd");
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "'w'", "18446744073709551615", "2^63");
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd");
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "'w'", "-1", "non-negative integer");
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "abcd");
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "'w'", "[4, 0]");
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", "abcdefgh");
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "overlapping");
  write_safetensors_raw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd");
  std::string bytes = read_all(p);
  bytes[0] = static_cast<char>(0xff);  // header length far beyond the file
  write_all(p, bytes);
  VOLT_EXPECT_ERROR(nn::load_safetensors(p), "header length", "exceeds");
}

TEST(Safetensors, StoredDtypeMustMatchOnLoad) {
  nn::Linear lin(2, 3);
  nn::StateDict sd = lin.state_dict();
  for (auto& [k, t] : sd)
    if (k == "weight") t = t.to(DType::i32);
  VOLT_EXPECT_ERROR(lin.load_state_dict(sd), "dtype mismatch", "weight", "expected float32", "got int32");
  optim::Adam adam(lin.parameters(), {.lr = 0.1});
  for (auto& p : lin.parameters()) p.set_grad(ones(p.shape()));
  adam.step();
  nn::StateDict os = adam.state_dict();
  for (auto& [k, t] : os)
    if (k.find("step") == std::string::npos) t = t.to(DType::f64);
  VOLT_EXPECT_ERROR(adam.load_state_dict(os), "is stored as float64", "keeps it as float32");
  os = adam.state_dict();
  for (auto& [k, t] : os)
    if (k.find("step") != std::string::npos) t = t.to(DType::f32);
  VOLT_EXPECT_ERROR(adam.load_state_dict(os), "i64 step count", "float32");
  VOLT_EXPECT_ERROR(adam.load_hyper_state({{"group.99999999999999999999999.lr", 0.1}}), "at most 6 digits");
  VOLT_EXPECT_ERROR(adam.load_hyper_state({{"state.0.0.step", -3.0}}), "not a step count");
}

// Found by fuzz_safetensors: shapes whose element count overflows int64 (undefined behaviour in shape_numel)
// or whose byte count wraps to 0 (so a 0-byte buffer "matched" a 2^61-element tensor).
TEST(Safetensors, HugeShapesAreRejected) {
  TempDir dir;
  const std::string bad = dir.file("huge.safetensors");
  auto write_header = [&](const std::string& header) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    write_all(bad, bytes + header);
  };
  write_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})");
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "'a'", "element count overflows");
  write_header(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})");
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "'a'", "byte count overflows");
  write_header(R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})");
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "'a'", "above 2^63 - 1");
  write_header(R"({"a":{"dtype":"U8","shape":[0,9223372036854775807,9223372036854775807],"data_offsets":[0,0]}})");
  VOLT_EXPECT_ERROR(nn::load_safetensors(bad), "too large");
  // A size-0 dimension with modest others is still an ordinary empty tensor.
  write_header(R"({"a":{"dtype":"F32","shape":[0,1000000,1000000],"data_offsets":[0,0]}})");
  auto sd = nn::load_safetensors(bad);
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd[0].second.numel(), 0);
}

TEST(AtomicWrite, ReplacesAndCleansUp) {
  TempDir dir;
  const std::string path = dir.file("state.json");
  nn::atomic_write_file(path, std::string("old"));
  EXPECT_EQ(read_all(path), "old");
  nn::save_json_atomic(path, {{"epoch", 2}});
  EXPECT_EQ(nn::load_json(path)["epoch"], 2);
  EXPECT_EQ(dir.count(), 1u);
}

TEST(AtomicWrite, ThrowingWriterLeavesOldFileAndNoTemp) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  nn::atomic_write_file(path, std::string("previous contents"));
  EXPECT_THROW(nn::atomic_write_file(path,
                                     [](const nn::ByteSink& write) {
                                       write("partial", 7);
                                       throw std::runtime_error("disk on fire");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_all(path), "previous contents");
  EXPECT_EQ(dir.count(), 1u);
  // Failing before any write (an undefined tensor) also leaves the old file.
  VOLT_EXPECT_ERROR(nn::save_safetensors(path, {{"x", Tensor()}}), "undefined");
  EXPECT_EQ(read_all(path), "previous contents");
  VOLT_EXPECT_ERROR(nn::atomic_write_file(dir.file("no/such/dir/f"), std::string("x")), "temporary file");
}

TEST(Safetensors, ModuleAndOptimizerCheckpointRoundTrip) {
  TempDir dir;
  Tensor p = from_vector<float>({1, 2, 3}).set_requires_grad();
  optim::Adam opt({p}, {.lr = 0.1});
  p.set_grad(from_vector<float>({1, -1, 0.5}));
  opt.step();
  nn::save_safetensors(dir.file("opt.safetensors"), opt.state_dict());
  Tensor q = p.detach().clone().set_requires_grad();
  optim::Adam opt2({q}, {.lr = 0.1});
  opt2.load_state_dict(nn::load_safetensors(dir.file("opt.safetensors")));
  for (auto* t : {&p, &q}) t->set_grad(from_vector<float>({0.3f, 0.2f, -1}));
  opt.step();
  opt2.step();
  EXPECT_EQ(p.to_vector<float>(), q.to_vector<float>());
}

TEST(FileDigest, Crc32MatchesZlibAndTheSavedBytes) {
  EXPECT_EQ(nn::crc32_update(0, "123456789", 9), 0xCBF43926u);  // the CRC-32 check value
  TempDir dir;
  const std::string path = dir.file("d.safetensors");
  nn::FileDigest d = nn::save_safetensors(path, all_dtypes());
  EXPECT_EQ(d.bytes, fs::file_size(path));
  EXPECT_EQ(nn::digest_file(path), d);
  EXPECT_NO_THROW(nn::verify_file_digest(path, d));
  VOLT_EXPECT_ERROR(nn::verify_file_digest(path, {d.bytes + 1, d.crc32}), "d.safetensors", "record says");
  VOLT_EXPECT_ERROR(nn::verify_file_digest(path, {d.bytes, d.crc32 ^ 1u}), "d.safetensors", "CRC-32");
  VOLT_EXPECT_ERROR(nn::digest_from_json({{"bytes", 3}}, "x.json"), "x.json", "crc32");
}
