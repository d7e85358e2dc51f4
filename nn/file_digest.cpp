#include <volt/nn/file_digest.h>

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <vector>

#include <volt/runtime/error.h>

namespace volt::nn {

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {  // zlib takes a uInt length
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, std::numeric_limits<uInt>::max()));
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

FileDigest digest_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), "digest_file: cannot open '", path, "'");
  FileDigest d;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    d.crc32 = crc32_update(d.crc32, buf.data(), got);
    d.bytes += got;
  }
  VOLT_CHECK(in.eof(), "digest_file: reading '", path, "' failed after ", d.bytes, " bytes");
  return d;
}

static std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

void verify_file_digest(const std::string& path, const FileDigest& expected) {
  const FileDigest got = digest_file(path);
  VOLT_CHECK(got.bytes == expected.bytes, "checkpoint file '", path, "' is ", got.bytes, " bytes but its record says ",
             expected.bytes, " (truncated, torn or replaced after the checkpoint was written)");
  VOLT_CHECK(got.crc32 == expected.crc32, "checkpoint file '", path, "' is corrupt: CRC-32 ", hex(got.crc32),
             " does not match the recorded ", hex(expected.crc32), " (same size, different bytes)");
}

nlohmann::json digest_to_json(const FileDigest& d) { return {{"bytes", d.bytes}, {"crc32", d.crc32}}; }

FileDigest digest_from_json(const nlohmann::json& j, const std::string& where) {
  VOLT_CHECK(j.is_object() && j.contains("bytes") && j.contains("crc32") && j.at("bytes").is_number_unsigned() &&
                 j.at("crc32").is_number_unsigned(),
             where, ": the file digest must be {\"bytes\": <unsigned>, \"crc32\": <unsigned>}, got ", j.dump());
  const uint64_t crc = j.at("crc32").get<uint64_t>();
  VOLT_CHECK(crc <= 0xffffffffull, where, ": crc32 ", crc, " does not fit 32 bits");
  return {j.at("bytes").get<uint64_t>(), static_cast<uint32_t>(crc)};
}

}  // namespace volt::nn
