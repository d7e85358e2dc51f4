#include <volt/data/npz.h>

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include <volt/data/npy.h>
#include <volt/runtime/error.h>

namespace volt::data {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50,
                   kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalLen = 30, kCentralLen = 46, kEndLen = 22;
// Deflate cannot expand data by more than ~1032x; a larger declared size is a corrupt (or hostile) header,
// refused before allocating the output.
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint64_t get64(const uint8_t* p) { return uint64_t{get32(p)} | (uint64_t{get32(p + 4)} << 32); }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

struct Entry {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, offset = 0;
};

class Archive {
 public:
  Archive(const std::string& path, const char* op) : path_(path), op_(op), in_(path, std::ios::binary) {
    VOLT_CHECK(in_.good(), op_, ": cannot open '", path_, "': ", std::strerror(errno));
    in_.seekg(0, std::ios::end);
    const std::streamoff end = in_.tellg();
    VOLT_CHECK(end >= 0, op_, ": cannot determine the size of '", path_, "'");
    size_ = static_cast<uint64_t>(end);
    read_directory();
  }

  const std::vector<Entry>& entries() const { return entries_; }

  // The uncompressed bytes of `e`, CRC-checked.
  std::string member(const Entry& e) {
    const std::string lh = read_at(e.offset, kLocalLen, ("the local header of member '" + e.name + "'").c_str());
    const auto* p = reinterpret_cast<const uint8_t*>(lh.data());
    VOLT_CHECK(get32(p) == kLocalSig, op_, ": '", path_, "' is corrupt: member '", e.name, "' has no local header at ",
               "offset ", e.offset, " (found ", hex32(get32(p)), ", expected the signature ", hex32(kLocalSig), ")");
    // The local header's sizes are not used: writers may leave them 0 (data descriptor) or 0xffffffff with a
    // zip64 extra field (np.savez forces that); the central directory's are authoritative.
    const uint64_t data_at = e.offset + kLocalLen + get16(p + 26) + get16(p + 28);
    std::string raw = read_at(data_at, e.csize, ("the data of member '" + e.name + "'").c_str());
    VOLT_CHECK(e.method != 0 || e.csize == e.usize, op_, ": '", path_, "' is corrupt: stored member '", e.name,
               "' has ", e.csize, " stored bytes but declares ", e.usize, " uncompressed bytes");
    const std::string out = e.method == 0 ? std::move(raw) : inflate_raw(raw, e);
    const auto crc = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
    VOLT_CHECK(crc == e.crc, op_, ": '", path_, "' is corrupt: member '", e.name, "' has CRC-32 ", hex32(crc),
               " but the archive records ", hex32(e.crc));
    return out;
  }

  std::string member_name(const Entry& e) const { return path_ + "[" + e.name + "]"; }

 private:
  std::string read_at(uint64_t offset, uint64_t n, const char* what) {
    VOLT_CHECK(offset <= size_ && n <= size_ - offset, op_, ": '", path_, "' is truncated or corrupt: ", what,
               " (", n, " bytes at offset ", offset, ") lies beyond the end of the ", size_, "-byte file");
    std::string s(n, '\0');
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(s.data(), static_cast<std::streamsize>(n));
    VOLT_CHECK(in_.good() && static_cast<uint64_t>(in_.gcount()) == n, op_, ": error reading '", path_, "'");
    return s;
  }

  void read_directory() {
    // The end record is the last 22 bytes unless the archive has a comment (up to 65535 bytes).
    const uint64_t tail_len = std::min<uint64_t>(size_, kEndLen + 0xffff);
    const std::string tail = read_at(size_ - tail_len, tail_len, "the end of the archive");
    const auto* t = reinterpret_cast<const uint8_t*>(tail.data());
    size_t at = std::string::npos;
    for (size_t i = tail.size() >= kEndLen ? tail.size() - kEndLen + 1 : 0; i-- > 0;)
      if (get32(t + i) == kEndSig) {
        at = i;
        break;
      }
    VOLT_CHECK(at != std::string::npos, op_, ": '", path_, "' is not a zip archive (.npz): no end-of-central-",
               "directory record (signature ", hex32(kEndSig), ") in its last ", tail_len, " bytes");
    const uint8_t* e = t + at;
    const uint64_t end_offset = size_ - tail_len + at;
    const uint16_t disk = get16(e + 4), cd_disk = get16(e + 6), count_here = get16(e + 8), count = get16(e + 10);
    const uint32_t cd_size = get32(e + 12), cd_offset = get32(e + 16);
    const bool zip64 = count == 0xffff || count_here == 0xffff || cd_size == 0xffffffffu ||
                       cd_offset == 0xffffffffu || (at >= 20 && get32(e - 20) == kZip64LocatorSig);
    VOLT_CHECK(!zip64, op_, ": '", path_, "' is a zip64 archive (more than 65535 members or over 4 GiB), which is ",
               "not supported; save the arrays as separate .npy files");
    VOLT_CHECK(disk == 0 && cd_disk == 0 && count_here == count, op_, ": '", path_,
               "' is a multi-disk (split) zip archive, which is not supported");
    VOLT_CHECK(uint64_t{cd_offset} + cd_size <= end_offset, op_, ": '", path_, "' is corrupt: its central directory (",
               cd_size, " bytes at offset ", cd_offset, ") overlaps or passes the end record at offset ", end_offset);
    const std::string cd = read_at(cd_offset, cd_size, "the central directory");
    const auto* p = reinterpret_cast<const uint8_t*>(cd.data());
    size_t pos = 0;
    std::set<std::string> seen;
    for (uint16_t k = 0; k < count; ++k) {
      VOLT_CHECK(pos + kCentralLen <= cd.size() && get32(p + pos) == kCentralSig, op_, ": '", path_,
                 "' is corrupt: central directory entry ", k, " of ", count, " is truncated or lacks the signature ",
                 hex32(kCentralSig));
      const uint8_t* c = p + pos;
      const uint16_t flags = get16(c + 8), name_len = get16(c + 28), extra_len = get16(c + 30),
                     comment_len = get16(c + 32);
      VOLT_CHECK(pos + kCentralLen + name_len + extra_len + comment_len <= cd.size(), op_, ": '", path_,
                 "' is corrupt: central directory entry ", k, " runs past the end of the directory");
      Entry en;
      en.name.assign(reinterpret_cast<const char*>(c + kCentralLen), name_len);
      en.method = get16(c + 10);
      en.crc = get32(c + 16);
      en.csize = get32(c + 20);
      en.usize = get32(c + 24);
      en.offset = get32(c + 42);
      read_zip64_extra(c + kCentralLen + name_len, extra_len, &en);
      VOLT_CHECK(!(flags & 1), op_, ": '", path_, "' member '", en.name, "' is encrypted, which is not supported");
      VOLT_CHECK(en.method == 0 || en.method == 8, op_, ": '", path_, "' member '", en.name,
                 "' uses compression method ", en.method, "; only 0 (stored) and 8 (deflate) are supported");
      VOLT_CHECK(seen.insert(en.name).second, op_, ": '", path_, "' holds two members named '", en.name, "'");
      entries_.push_back(std::move(en));
      pos += kCentralLen + name_len + extra_len + comment_len;
    }
  }

  // Sizes and offsets of 0xffffffff live in the zip64 extended-information extra field (id 1), in the order
  // uncompressed size, compressed size, offset, each present only when its 32-bit field is 0xffffffff.
  void read_zip64_extra(const uint8_t* x, size_t len, Entry* en) {
    const bool need_u = en->usize == 0xffffffffu, need_c = en->csize == 0xffffffffu, need_o = en->offset == 0xffffffffu;
    if (!need_u && !need_c && !need_o) return;
    for (size_t i = 0; i + 4 <= len;) {
      const uint16_t id = get16(x + i), n = get16(x + i + 2);
      if (i + 4 + n > len) break;
      if (id == 1) {
        const uint8_t* v = x + i + 4;
        size_t have = n;
        for (uint64_t* field : {need_u ? &en->usize : nullptr, need_c ? &en->csize : nullptr,
                                need_o ? &en->offset : nullptr}) {
          if (!field) continue;
          VOLT_CHECK(have >= 8, op_, ": '", path_, "' is corrupt: member '", en->name,
                     "' has a zip64 extra field too short for its sizes");
          *field = get64(v);
          v += 8;
          have -= 8;
        }
        return;
      }
      i += 4 + n;
    }
    VOLT_FAIL(op_, ": '", path_, "' member '", en->name, "' has a 32-bit size or offset of 0xffffffff but no zip64 ",
              "extra field; the archive is corrupt or needs zip64, which is not supported");
  }

  std::string inflate_raw(const std::string& in, const Entry& e) {
    VOLT_CHECK(e.usize <= std::max<uint64_t>(e.csize, 1) * kMaxDeflateRatio, op_, ": '", path_, "' is corrupt: member '",
               e.name, "' declares ", e.usize, " uncompressed bytes from ", e.csize,
               " deflated bytes, more than deflate can produce");
    std::string out(e.usize, '\0');
    z_stream z{};
    VOLT_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, op_, ": zlib inflateInit2 failed");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_FINISH);
    const uint64_t produced = z.total_out;
    const std::string msg = z.msg ? z.msg : "";
    inflateEnd(&z);
    VOLT_CHECK(rc == Z_STREAM_END, op_, ": '", path_, "' is corrupt: member '", e.name, "' does not inflate to its ",
               "declared ", e.usize, " bytes (zlib: ", rc == Z_BUF_ERROR ? "more output than declared or truncated input"
                                                                     : msg.empty() ? "error " + std::to_string(rc) : msg,
               ", ", produced, " bytes produced)");
    VOLT_CHECK(produced == e.usize, op_, ": '", path_, "' is corrupt: member '", e.name, "' inflates to ", produced,
               " bytes but declares ", e.usize);
    return out;
  }

  std::string path_;
  const char* op_;
  std::ifstream in_;
  uint64_t size_ = 0;
  std::vector<Entry> entries_;
};

bool ends_with_npy(const std::string& s) { return s.size() >= 4 && s.compare(s.size() - 4, 4, ".npy") == 0; }
std::string key_of(const std::string& name) { return ends_with_npy(name) ? name.substr(0, name.size() - 4) : name; }

void put16(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

std::string deflate_raw(const std::string& in, const std::string& path) {
  z_stream z{};
  VOLT_CHECK(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
             "write_npz: zlib deflateInit2 failed for '", path, "'");
  std::string out(deflateBound(&z, static_cast<uLong>(in.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  VOLT_CHECK(rc == Z_STREAM_END, "write_npz: zlib deflate failed (", rc, ") for '", path, "'");
  return out;
}

}  // namespace

std::vector<std::string> npz_keys(const std::string& path) {
  Archive a(path, "npz_keys");
  std::vector<std::string> keys;
  for (const Entry& e : a.entries()) keys.push_back(key_of(e.name));
  return keys;
}

std::map<std::string, Tensor> read_npz(const std::string& path) {
  Archive a(path, "read_npz");
  std::map<std::string, Tensor> out;
  for (const Entry& e : a.entries()) {
    VOLT_CHECK(ends_with_npy(e.name), "read_npz: '", path, "' member '", e.name,
               "' is not a .npy file; an .npz archive holds only <key>.npy members");
    out.emplace(key_of(e.name), parse_npy(a.member(e), a.member_name(e)));
  }
  return out;
}

Tensor read_npz_array(const std::string& path, const std::string& key) {
  Archive a(path, "read_npz");
  const std::string want = ends_with_npy(key) ? key : key + ".npy";
  std::string keys;
  for (const Entry& e : a.entries()) {
    if (e.name == want) return parse_npy(a.member(e), a.member_name(e));
    keys += (keys.empty() ? "'" : ", '") + key_of(e.name) + "'";
  }
  VOLT_FAIL("read_npz: '", path, "' has no array '", key, "'; its keys are ", keys.empty() ? "(none)" : keys);
}

void write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays, bool compress) {
  VOLT_CHECK(arrays.size() < 0xffff, "write_npz: ", arrays.size(), " arrays need a zip64 archive, which is not ",
             "supported (at most 65534)");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  VOLT_CHECK(out.good(), "write_npz: cannot create '", path, "': ", std::strerror(errno));
  std::string central;
  uint64_t offset = 0;
  // Fixed timestamp (1980-01-01 00:00): the same arrays always give the same bytes.
  constexpr uint32_t kDosTime = 0, kDosDate = (1 << 5) | 1;
  for (const auto& [key, t] : arrays) {
    VOLT_CHECK(!key.empty() && key.size() < 0xfff0, "write_npz: key '", key, "' must be non-empty and shorter than ",
               "65520 bytes");
    const std::string name = key + ".npy";
    const std::string npy = npy_bytes(t);
    const std::string data = compress ? deflate_raw(npy, path) : std::string();
    const std::string& body = compress ? data : npy;
    VOLT_CHECK(npy.size() < 0xffffffffu && body.size() < 0xffffffffu && offset < 0xffffffffu, "write_npz: array '",
               key, "' ", t.shape_str(), " makes '", path, "' need zip64 (over 4 GiB), which is not supported; ",
               "write it with write_npy instead");
    const auto crc = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(npy.data()), static_cast<uInt>(npy.size())));
    bool utf8 = false;
    for (unsigned char ch : name) utf8 |= ch >= 0x80;
    const uint32_t method = compress ? 8 : 0, flags = utf8 ? (1u << 11) : 0;
    auto common = [&](std::string& s) {  // version needed .. extra length, shared by both headers
      put16(s, 20);
      put16(s, flags);
      put16(s, method);
      put16(s, kDosTime);
      put16(s, kDosDate);
      put32(s, crc);
      put32(s, static_cast<uint32_t>(body.size()));
      put32(s, static_cast<uint32_t>(npy.size()));
      put16(s, static_cast<uint32_t>(name.size()));
      put16(s, 0);
    };
    std::string local;
    put32(local, kLocalSig);
    common(local);
    local += name;
    put32(central, kCentralSig);
    put16(central, 20);  // version made by
    common(central);
    put16(central, 0);  // comment length
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, 0);  // external attributes
    put32(central, static_cast<uint32_t>(offset));
    central += name;
    out.write(local.data(), static_cast<std::streamsize>(local.size()));
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
    offset += local.size() + body.size();
  }
  VOLT_CHECK(offset + central.size() < 0xffffffffu, "write_npz: '", path, "' would exceed 4 GiB and need zip64, ",
             "which is not supported");
  std::string end;
  put32(end, kEndSig);
  put16(end, 0);
  put16(end, 0);
  put16(end, static_cast<uint32_t>(arrays.size()));
  put16(end, static_cast<uint32_t>(arrays.size()));
  put32(end, static_cast<uint32_t>(central.size()));
  put32(end, static_cast<uint32_t>(offset));
  put16(end, 0);
  out.write(central.data(), static_cast<std::streamsize>(central.size()));
  out.write(end.data(), static_cast<std::streamsize>(end.size()));
  VOLT_CHECK(out.good(), "write_npz: error writing '", path, "'");
}

}  // namespace volt::data
