#include <volt/data/token_shard.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <volt/runtime/atomic_file.h>
#include <volt/runtime/error.h>

namespace volt::data {

namespace {

std::string where(const std::string& name) { return "token shard '" + name + "': "; }

}  // namespace

TokenShard::TokenShard(const std::string& path, int64_t vocab_size) : name_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VOLT_CHECK(fd >= 0, where(path), "cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    VOLT_CHECK(false, where(path), "cannot stat (", std::strerror(err), ")");
  }
  const auto bytes = static_cast<int64_t>(st.st_size);
  if (bytes < kHeaderBytes) {
    ::close(fd);
    VOLT_CHECK(false, where(path), "truncated: ", bytes, " bytes, shorter than the ", kHeaderBytes,
               "-byte header (256 int32: magic ", kMagic, ", version, token count)");
  }
  map_ = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    VOLT_CHECK(false, where(path), "cannot map ", bytes, " bytes (", std::strerror(err), ")");
  }
  map_bytes_ = static_cast<size_t>(bytes);
  try {
    int32_t header[3];
    std::memcpy(header, map_, sizeof(header));
    VOLT_CHECK(header[0] == kMagic, where(path), "wrong magic number ", header[0], " (expected ", kMagic,
               ": a GPT-2 token shard starts with a 256-int32 header)");
    VOLT_CHECK(header[1] == kVersion, where(path), "unsupported version ", header[1], " (expected ", kVersion,
               ": uint16 tokens)");
    const int64_t count = header[2];
    const int64_t payload = bytes - kHeaderBytes;
    VOLT_CHECK(count >= 0, where(path), "negative token count ", count, " in the header");
    VOLT_CHECK(payload >= 2 * count, where(path), "truncated: the header says ", count, " tokens (", 2 * count,
               " bytes) but the file holds ", payload, " bytes after the header");
    VOLT_CHECK(payload == 2 * count, where(path), "token count mismatch: the header says ", count,
               " tokens but the file holds ", payload, " bytes after the header (", payload / 2, " tokens",
               payload % 2 ? " and one stray byte" : "", ")");
    tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kHeaderBytes);
    size_ = count;
    check_tokens(vocab_size);
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

TokenShard::TokenShard(std::vector<uint16_t> tokens, std::string name, int64_t vocab_size)
    : name_(std::move(name)), owned_(std::move(tokens)) {
  tokens_ = owned_.data();
  size_ = static_cast<int64_t>(owned_.size());
  check_tokens(vocab_size);
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

void TokenShard::check_tokens(int64_t vocab_size) const {
  VOLT_CHECK(vocab_size > 0 && vocab_size <= 65536, where(name_), "vocab_size must be in [1, 65536], got ",
             vocab_size);
  if (vocab_size == 65536) return;  // every uint16 fits
  const auto limit = static_cast<uint16_t>(vocab_size);
  for (int64_t i = 0; i < size_; ++i)
    VOLT_CHECK(tokens_[i] < limit, where(name_), "token ", tokens_[i], " at position ", i, " is >= vocab_size ",
               vocab_size);
}

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  VOLT_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "write_token_shard('", path, "'): ", tokens.size(),
             " tokens do not fit the header's int32 count");
  int32_t header[TokenShard::kHeaderInts] = {};
  header[0] = TokenShard::kMagic;
  header[1] = TokenShard::kVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  atomic_write_file(path, [&](const ByteSink& write) {
    write(header, sizeof(header));
    write(tokens.data(), tokens.size() * sizeof(uint16_t));
  });
}

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    VOLT_CHECK(tokens[i] >= 0 && tokens[i] < kVocabSize, "ByteTokenizer::decode: token ", tokens[i],
               " at position ", i, " is not a byte (expected 0 to 255)");
    out[i] = static_cast<char>(tokens[i]);
  }
  return out;
}

}  // namespace volt::data
