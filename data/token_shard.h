#pragma once
/// @file
/// Token streams for language models: the common GPT-2 token-shard format, memory-mapped, and a byte-level
/// tokenizer for plain text.
///
/// Shard format (little-endian): a header of 256 int32 (magic 20240520, version 1, token count N, the rest
/// unused), then N uint16 tokens. A file of any other size, magic or version is refused.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace volt::data {

/// One token stream: a memory-mapped shard file (read-only, shared by every reader) or tokens held in memory.
/// Immutable after construction, so any number of threads may read it.
class TokenShard {
 public:
  static constexpr int32_t kMagic = 20240520;
  static constexpr int32_t kVersion = 1;
  static constexpr int64_t kHeaderInts = 256;
  static constexpr int64_t kHeaderBytes = kHeaderInts * 4;

  /// Maps the shard file `path` and checks it: header present, magic, version, file size equal to
  /// 1024 + 2 N bytes, and every token < vocab_size. Each failure is a volt::Error naming the file and what was
  /// found ("truncated", "wrong magic", "token count mismatch", "token 300 at position 12 >= vocab_size 256").
  explicit TokenShard(const std::string& path, int64_t vocab_size = 65536);
  /// Tokens held in memory, called `name` in messages; checked against vocab_size the same way.
  TokenShard(std::vector<uint16_t> tokens, std::string name, int64_t vocab_size = 65536);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  int64_t size() const { return size_; }
  const uint16_t* data() const { return tokens_; }
  uint16_t operator[](int64_t i) const { return tokens_[i]; }
  /// The file path, or the name given to in-memory tokens.
  const std::string& name() const { return name_; }
  /// Whether the tokens are a mapping of a file (false: held in memory).
  bool mapped() const { return map_ != nullptr; }

 private:
  void check_tokens(int64_t vocab_size) const;
  std::string name_;
  std::vector<uint16_t> owned_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t size_ = 0;
};

/// Writes `tokens` as a shard file (header + uint16 tokens), atomically (a temporary file renamed into place).
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

/// Byte-level tokenizer: token = byte value (vocabulary 256), so any text, in any encoding, round-trips.
struct ByteTokenizer {
  static constexpr int64_t kVocabSize = 256;
  static std::vector<uint16_t> encode(std::string_view text);
  /// Throws volt::Error naming the position of a token >= 256.
  static std::string decode(const std::vector<int64_t>& tokens);
};

}  // namespace volt::data
