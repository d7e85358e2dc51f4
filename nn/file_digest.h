#pragma once
/// @file
/// File digests for checkpoints: the size and CRC-32 (zlib's polynomial) of a file, recorded when it is written
/// and verified before it is trusted. A torn write, a truncation or a flipped byte then fails loudly with the
/// file's name instead of loading silently wrong weights.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace volt::nn {

struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  bool operator==(const FileDigest&) const = default;
};

/// Extends a running CRC-32 (start from 0) with n bytes.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

/// Reads `path` once. Throws volt::Error when it cannot be opened or read.
FileDigest digest_file(const std::string& path);

/// Throws volt::Error naming `path` and what mismatched (its size, or its CRC-32 for a same-size change).
void verify_file_digest(const std::string& path, const FileDigest& expected);

/// {"bytes": N, "crc32": C} and back; `where` names the record in errors about a malformed entry.
nlohmann::json digest_to_json(const FileDigest& d);
FileDigest digest_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace volt::nn
