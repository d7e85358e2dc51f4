#include <volt/data/npy.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>

#include <volt/runtime/error.h>

namespace volt::data {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// A parsed 'descr': kind 'f', 'i', 'u' or 'b', the element size in bytes, and the byte order.
struct NpyType {
  char kind = 0;
  int size = 0;
  bool big_endian = false;
  DType dtype = DType::f32;  // what the reader returns
};

struct NpyHeader {
  NpyType type;
  Shape shape;
  bool fortran_order = false;
  size_t data_offset = 0;  // bytes from the start of the file to the first element
  int64_t count = 0;       // elements
  size_t nbytes = 0;       // data bytes the header promises
};

// Printable form of header text for error messages: control bytes escaped, at most 200 characters.
std::string quote(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return s.size() > 200 ? out + "..." : out;
}

NpyType parse_descr(const std::string& descr, const std::string& name) {
  const std::string fix = " (supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 b1, with a byte-order character)";
  VOLT_CHECK(!descr.empty() && descr[0] != '\0' && std::strchr("<>|=", descr[0]) != nullptr, "read_npy: '", name,
             "' has dtype '", quote(descr), "' without a byte-order character", fix);
  VOLT_CHECK(descr.size() >= 3, "read_npy: '", name, "' has unsupported dtype '", quote(descr), "'", fix);
  NpyType t;
  t.big_endian = descr[0] == '>';
  t.kind = descr[1];
  int size = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    VOLT_CHECK(std::isdigit(static_cast<unsigned char>(descr[i])) && size < 1000, "read_npy: '", name,
               "' has unsupported dtype '", quote(descr), "'", fix);
    size = size * 10 + (descr[i] - '0');
  }
  t.size = size;
  auto is = [&](char k, int s) { return t.kind == k && t.size == s; };
  if (is('f', 2)) t.dtype = DType::f16;
  else if (is('f', 4)) t.dtype = DType::f32;
  else if (is('f', 8)) t.dtype = DType::f64;
  else if (is('i', 2) || is('i', 4) || is('u', 2)) t.dtype = DType::i32;
  else if (is('i', 8) || is('u', 4)) t.dtype = DType::i64;
  else if (is('u', 1)) t.dtype = DType::u8;
  else if (is('i', 1)) t.dtype = DType::i8;
  else if (is('b', 1)) t.dtype = DType::boolean;
  else if (is('u', 8))
    VOLT_FAIL("read_npy: '", name, "' has dtype '", descr,
              "' (uint64), which no Volt dtype holds exactly; save it as int64 (arr.astype(np.int64)) instead");
  else
    VOLT_FAIL("read_npy: '", name, "' has unsupported dtype '", quote(descr), "'", fix);
  return t;
}

// The header dict, a Python literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  void parse(std::string* descr, bool* fortran, std::optional<Shape>* shape) {
    bool have_descr = false, have_fortran = false;
    skip();
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      const std::string key = string_literal("a quoted key");
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        VOLT_CHECK(peek() != '[', "read_npy: '", name_, "' has a structured dtype (a list of fields in 'descr'), ",
                   "which is not supported; save each field as its own array");
        *descr = string_literal("a quoted dtype string for 'descr'");
        have_descr = true;
      } else if (key == "fortran_order") {
        *fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        *shape = tuple();
      } else {
        VOLT_FAIL("read_npy: '", name_, "' has unknown header key '", quote(key),
                  "' (expected exactly 'descr', 'fortran_order' and 'shape') in header ", quote(s_));
      }
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip();
      break;
    }
    expect('}');
    skip();
    VOLT_CHECK(pos_ == s_.size(), "read_npy: '", name_, "' has unexpected text after the header dict at offset ",
               pos_, " of header ", quote(s_));
    const char* missing = !have_descr ? "descr" : !have_fortran ? "fortran_order" : !shape->has_value() ? "shape"
                                                                                                       : nullptr;
    VOLT_CHECK(missing == nullptr, "read_npy: '", name_, "' header lacks the key '", missing, "' (header ",
               quote(s_), ")");
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  [[noreturn]] void fail(const std::string& expected) const {
    VOLT_FAIL("read_npy: '", name_, "' has a malformed header: expected ", expected, " at offset ", pos_,
              pos_ < s_.size() ? " ('" + quote(s_.substr(pos_, 1)) + "')" : std::string(" (end of header)"),
              " of header ", quote(s_));
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("'") + c + "'");
    ++pos_;
  }
  std::string string_literal(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(what);
    std::string out;
    for (++pos_; pos_ < s_.size() && s_[pos_] != q; ++pos_) {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;
      out.push_back(s_[pos_]);
    }
    if (pos_ >= s_.size()) fail(std::string("a closing ") + q);
    ++pos_;
    return out;
  }
  bool boolean() {
    for (const bool v : {true, false}) {
      const std::string_view word = v ? "True" : "False";
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return v;
      }
    }
    fail("True or False for 'fortran_order'");
  }
  Shape tuple() {
    if (peek() != '(') fail("a tuple of sizes for 'shape'");
    ++pos_;
    Shape shape;
    for (;;) {
      skip();
      if (peek() == ')') break;
      VOLT_CHECK(peek() != '-', "read_npy: '", name_, "' has a negative dimension in its shape (header ", quote(s_),
                 ")");
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("a dimension size or ')' in 'shape'");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        VOLT_CHECK(!__builtin_mul_overflow(v, 10, &v) && !__builtin_add_overflow(v, peek() - '0', &v), "read_npy: '",
                   name_, "' has a dimension size that overflows 64 bits (header ", quote(s_), ")");
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2 long literal, as old NumPy wrote: (3L, 4L)
      shape.push_back(v);
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip();
      if (peek() != ')') fail("',' or ')' in 'shape'");
    }
    ++pos_;
    VOLT_CHECK(shape.size() <= 64, "read_npy: '", name_, "' has ", shape.size(),
               " dimensions; at most 64 are supported (NumPy's own limit)");
    return shape;
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// The total header size (magic, version, length field and dict) from the first bytes of a file of
// `file_size` bytes; `prefix` holds at least min(file_size, 12) bytes.
size_t header_size(std::string_view prefix, size_t file_size, const std::string& name) {
  const auto* p = reinterpret_cast<const uint8_t*>(prefix.data());
  VOLT_CHECK(prefix.size() >= kMagicLen && std::memcmp(p, kMagic, kMagicLen) == 0, "read_npy: '", name,
             "' is not a .npy file: it starts with '", quote(prefix.substr(0, kMagicLen)),
             "' instead of the magic string '\\x93NUMPY'");
  VOLT_CHECK(prefix.size() >= 8, "read_npy: '", name, "' is truncated: ", file_size,
             " bytes, too short for the version bytes after the magic string");
  const int major = p[6], minor = p[7];
  VOLT_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, "read_npy: '", name, "' has format version ",
             major, ".", minor, "; supported versions are 1.0, 2.0 and 3.0");
  const size_t len_bytes = major == 1 ? 2 : 4;
  VOLT_CHECK(prefix.size() >= 8 + len_bytes, "read_npy: '", name, "' is truncated: ", file_size,
             " bytes, too short for the header length field of format ", major, ".0");
  const size_t len = major == 1 ? le16(p + 8) : le32(p + 8);
  const size_t total = 8 + len_bytes + len;
  VOLT_CHECK(file_size >= total, "read_npy: '", name, "' is truncated: the header declares ", len,
             " bytes, so it ends at byte ", total, ", but the file has ", file_size, " bytes");
  return total;
}

// Parses the complete header `head` (header_size bytes) of a file holding `file_size` bytes and checks the
// data size the shape implies against the rest of the file.
NpyHeader parse_header(std::string_view head, size_t file_size, const std::string& name) {
  const size_t len_bytes = static_cast<uint8_t>(head[6]) == 1 ? 2 : 4;
  std::string_view dict = head.substr(8 + len_bytes);
  std::string descr;
  std::optional<Shape> shape;
  NpyHeader h;
  DictParser(dict, name).parse(&descr, &h.fortran_order, &shape);
  h.type = parse_descr(descr, name);
  h.shape = *shape;
  h.data_offset = head.size();
  int64_t count = 1;
  for (size_t d = 0; d < h.shape.size(); ++d)
    VOLT_CHECK(!__builtin_mul_overflow(count, h.shape[d], &count), "read_npy: '", name, "' has shape ",
               shape_to_string(h.shape), " whose element count overflows 64 bits");
  h.count = count;
  size_t nbytes = 0;
  VOLT_CHECK(!__builtin_mul_overflow(static_cast<size_t>(count), static_cast<size_t>(h.type.size), &nbytes),
             "read_npy: '", name, "' has shape ", shape_to_string(h.shape), " whose byte count overflows");
  h.nbytes = nbytes;
  const size_t have = file_size - h.data_offset;
  VOLT_CHECK(have == nbytes, "read_npy: '", name, "' is ", have < nbytes ? "truncated" : "followed by trailing bytes",
             ": shape ", shape_to_string(h.shape), " of dtype '", descr, "' needs ", nbytes,
             " data bytes after the ", h.data_offset, "-byte header but the file has ", have);
  return h;
}

template <class T>
T load(const uint8_t* p, bool big) {
  T v;
  std::memcpy(&v, p, sizeof v);
  if (big) {
    if constexpr (sizeof(T) == 2) v = std::bit_cast<T>(__builtin_bswap16(std::bit_cast<uint16_t>(v)));
    if constexpr (sizeof(T) == 4) v = std::bit_cast<T>(__builtin_bswap32(std::bit_cast<uint32_t>(v)));
    if constexpr (sizeof(T) == 8) v = std::bit_cast<T>(__builtin_bswap64(std::bit_cast<uint64_t>(v)));
  }
  return v;
}

// Swaps every `size`-byte element of `p` in place.
void byteswap(void* data, size_t count, int size) {
  auto* p = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < count; ++i, p += size) std::reverse(p, p + size);
}

template <class From, class To>
void widen(const uint8_t* src, size_t count, bool big, To* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<To>(load<From>(src + i * sizeof(From), big));
}

// Reads the elements through `read(dst, n)` (which delivers exactly n bytes) into a tensor of the header's
// shape and the reader's dtype.
Tensor decode(const NpyHeader& h, const std::function<void(void*, size_t)>& read) {
  Shape storage_shape = h.shape;
  if (h.fortran_order) std::reverse(storage_shape.begin(), storage_shape.end());
  Tensor out = empty(storage_shape, h.type.dtype);
  const auto n = static_cast<size_t>(h.count);
  const NpyType& t = h.type;
  if (itemsize(t.dtype) == static_cast<size_t>(t.size)) {
    if (h.nbytes) read(out.data_ptr(), h.nbytes);
    if (t.big_endian && t.size > 1) byteswap(out.data_ptr(), n, t.size);
    if (t.kind == 'b') {
      auto* b = static_cast<uint8_t*>(out.data_ptr());
      for (size_t i = 0; i < n; ++i) b[i] = b[i] != 0;
    }
  } else {
    std::vector<uint8_t> raw(h.nbytes);
    if (h.nbytes) read(raw.data(), h.nbytes);
    const bool big = t.big_endian;
    if (t.kind == 'i' && t.size == 2) widen<int16_t>(raw.data(), n, big, out.data<int32_t>());
    else if (t.kind == 'u' && t.size == 2) widen<uint16_t>(raw.data(), n, big, out.data<int32_t>());
    else if (t.kind == 'u' && t.size == 4) widen<uint32_t>(raw.data(), n, big, out.data<int64_t>());
    else VOLT_ASSERT(false, "no widening for kind ", t.kind, t.size);
  }
  if (!h.fortran_order || h.shape.size() < 2) return out;
  // A column-major (d0, ..., dk) array is the row-major (dk, ..., d0) array of its transpose.
  Shape rev(h.shape.size());
  for (size_t d = 0; d < rev.size(); ++d) rev[d] = static_cast<int64_t>(rev.size() - 1 - d);
  return out.permute(rev).contiguous();
}

const char* descr_code(DType t) {
  switch (t) {
    case DType::f16: return "f2";
    case DType::f32: return "f4";
    case DType::f64: return "f8";
    case DType::i32: return "i4";
    case DType::i64: return "i8";
    case DType::u8: return "u1";
    case DType::i8: return "i1";
    case DType::boolean: return "b1";
    case DType::bf16: break;
  }
  VOLT_FAIL("write_npy: bf16 has no NumPy dtype; convert the tensor with .to(DType::f32) before saving it");
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& name) {
  const size_t head = header_size(bytes.substr(0, 12), bytes.size(), name);
  const NpyHeader h = parse_header(bytes.substr(0, head), bytes.size(), name);
  size_t pos = h.data_offset;
  return decode(h, [&](void* dst, size_t n) {
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
  });
}

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), "read_npy: cannot open '", path, "': ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  VOLT_CHECK(end >= 0, "read_npy: cannot determine the size of '", path, "'");
  in.seekg(0);
  const auto size = static_cast<size_t>(end);
  auto read = [&](void* dst, size_t n) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    VOLT_CHECK(in.good() && static_cast<size_t>(in.gcount()) == n, "read_npy: error reading '", path, "'");
  };
  std::string head(std::min<size_t>(size, 12), '\0');
  read(head.data(), head.size());
  const size_t total = header_size(head, size, path);
  const size_t got = head.size();
  head.resize(total);
  if (total > got) read(head.data() + got, total - got);
  else in.seekg(static_cast<std::streamoff>(total));
  const NpyHeader h = parse_header(head, size, path);
  return decode(h, read);
}

std::string npy_bytes(const Tensor& t, const NpyWriteOptions& options) {
  VOLT_CHECK(t.defined(), "write_npy: the tensor is undefined");
  VOLT_CHECK(options.version >= 0 && options.version <= 3, "write_npy: options.version must be 0 (automatic), 1, 2 ",
             "or 3, got ", options.version);
  const char* code = descr_code(t.dtype());
  const bool one_byte = itemsize(t.dtype()) == 1;
  Tensor c = t.detach().cpu();
  if (options.fortran_order && c.dim() >= 2) {
    Shape rev(static_cast<size_t>(c.dim()));
    for (size_t d = 0; d < rev.size(); ++d) rev[d] = static_cast<int64_t>(rev.size() - 1 - d);
    c = c.permute(rev);
  }
  c = c.contiguous();
  std::string dict = std::string("{'descr': '") + (one_byte ? '|' : options.big_endian ? '>' : '<') + code +
                     "', 'fortran_order': " + (options.fortran_order ? "True" : "False") + ", 'shape': " +
                     shape_to_string(t.shape()) + ", }";  // NumPy's spelling: (), (3,), (2, 3)
  int version = options.version;
  // magic + version + length field + dict + '\n', padded with spaces to a multiple of 64
  auto padded = [&](int v) {
    const size_t pre = 8 + (v == 1 ? 2 : 4);
    return (pre + dict.size() + 1 + 63) / 64 * 64 - pre;
  };
  if (version == 0) version = padded(1) <= 0xffff ? 1 : 2;
  const size_t len = padded(version);
  VOLT_CHECK(version != 1 || len <= 0xffff, "write_npy: the header of shape ", t.shape_str(), " needs ", len,
             " bytes, more than format 1.0's 65535; use version 2 or 0 (automatic)");
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(version));
  out.push_back('\0');
  for (size_t b = 0; b < (version == 1 ? 2u : 4u); ++b) out.push_back(static_cast<char>((len >> (8 * b)) & 0xff));
  out += dict;
  out.append(len - dict.size() - 1, ' ');
  out.push_back('\n');
  const size_t data_at = out.size();
  out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  if (options.big_endian && !one_byte)
    byteswap(out.data() + data_at, static_cast<size_t>(c.numel()), static_cast<int>(itemsize(c.dtype())));
  return out;
}

void write_npy(const std::string& path, const Tensor& t, const NpyWriteOptions& options) {
  const std::string bytes = npy_bytes(t, options);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  VOLT_CHECK(out.good(), "write_npy: cannot create '", path, "': ", std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  VOLT_CHECK(out.good(), "write_npy: error writing '", path, "'");
}

}  // namespace volt::data
