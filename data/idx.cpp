#include <volt/data/idx.h>

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <volt/runtime/error.h>

namespace volt::data {

namespace {

std::string hex(uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", width, v);
  return buf;
}

std::string read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  VOLT_CHECK(f != nullptr, "read_idx: cannot open '", path, "': ", std::strerror(errno));
  std::string out;
  std::vector<char> buf(1 << 20);
  int n = 0;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) out.append(buf.data(), n);
  int code = Z_OK;
  const char* msg = gzerror(f, &code);
  std::string err = (n < 0 || (code != Z_OK && code != Z_STREAM_END)) ? std::string(msg ? msg : "read error") : "";
  gzclose(f);
  VOLT_CHECK(err.empty(), "read_idx: '", path, "' is a corrupt or truncated gzip file (zlib: ", err, ") after ",
             out.size(), " decompressed bytes");
  return out;
}

}  // namespace

Tensor read_idx(const std::string& path, int expected_ndim) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), "read_idx: cannot open '", path, "': ", std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  VOLT_CHECK(!in.bad(), "read_idx: error reading '", path, "'");
  const bool gz = bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x1f && static_cast<uint8_t>(bytes[1]) == 0x8b;
  if (gz) bytes = read_gzip(path);
  const char* what = gz ? " bytes after decompression" : " bytes";
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  VOLT_CHECK(bytes.size() >= 4, "read_idx: '", path, "' is ", bytes.size(), what,
             ", too short for the 4-byte IDX magic number");
  const uint32_t magic = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  VOLT_CHECK(p[0] == 0 && p[1] == 0, "read_idx: '", path, "' is not an IDX file: magic number ", hex(magic, 8),
             " (an IDX magic number is 0x0000TTNN with TT the element type and NN the dimension count)");
  VOLT_CHECK(p[2] == 0x08, "read_idx: '", path, "' has element type byte ", hex(p[2], 2), " (magic number ",
             hex(magic, 8), "); only 0x08 (unsigned byte) is supported");
  const int ndim = p[3];
  VOLT_CHECK(ndim >= 1, "read_idx: '", path, "' declares 0 dimensions (magic number ", hex(magic, 8), ")");
  if (expected_ndim >= 0)
    VOLT_CHECK(ndim == expected_ndim, "read_idx: '", path, "' has magic number ", hex(magic, 8), " (", ndim,
               " dimensions) but ", hex(0x800u + static_cast<uint32_t>(expected_ndim), 8), " (", expected_ndim,
               " dimensions) was expected");
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  VOLT_CHECK(bytes.size() >= header, "read_idx: '", path, "' is truncated: ", bytes.size(), what,
             " but the header of ", ndim, " dimensions alone needs ", header);
  Shape shape(static_cast<size_t>(ndim));
  for (int d = 0; d < ndim; ++d) {
    const uint8_t* q = p + 4 + 4 * d;
    shape[static_cast<size_t>(d)] =
        static_cast<int64_t>((uint32_t{q[0]} << 24) | (uint32_t{q[1]} << 16) | (uint32_t{q[2]} << 8) | q[3]);
  }
  // Checked: 255 dimensions of up to 2^32 - 1 each overflow any integer type.
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d)
    VOLT_CHECK(!__builtin_mul_overflow(count, shape[static_cast<size_t>(d)], &count), "read_idx: '", path,
               "' has header shape ", shape_to_string(shape), " whose element count overflows 64 bits (dimension ",
               d, "); the file has ", bytes.size(), what, ", expected a shape that fits the data");
  size_t expected = 0;
  VOLT_CHECK(!__builtin_add_overflow(header, static_cast<size_t>(count), &expected), "read_idx: '", path,
             "' has header shape ", shape_to_string(shape), " whose byte count overflows");
  VOLT_CHECK(bytes.size() == expected, "read_idx: '", path, "' is ",
             bytes.size() < expected ? "truncated" : "followed by trailing bytes", ": header shape ",
             shape_to_string(shape), " needs ", expected, " bytes in all but the file has ", bytes.size(), what);
  Tensor out = empty(shape, DType::u8);
  if (count) std::memcpy(out.data_ptr(), p + header, static_cast<size_t>(count));
  return out;
}

void write_idx(const std::string& path, const Tensor& data, bool gzip) {
  VOLT_CHECK(data.defined() && data.dtype() == DType::u8, "write_idx: data must be a u8 tensor, got ",
             data.defined() ? dtype_name(data.dtype()) : "an undefined tensor");
  VOLT_CHECK(data.dim() >= 1 && data.dim() <= 255, "write_idx: data must have 1..255 dimensions, got ", data.dim());
  Tensor c = data.cpu().contiguous();
  std::string bytes = {0, 0, 0x08, static_cast<char>(c.dim())};
  for (int64_t s : c.shape()) {
    VOLT_CHECK(s <= 0xffffffffLL, "write_idx: dimension size ", s, " does not fit the 32-bit IDX header");
    for (int sh = 24; sh >= 0; sh -= 8) bytes.push_back(static_cast<char>((static_cast<uint64_t>(s) >> sh) & 0xff));
  }
  bytes.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    VOLT_CHECK(f != nullptr, "write_idx: cannot create '", path, "': ", std::strerror(errno));
    const int n = gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    const int rc = gzclose(f);
    VOLT_CHECK(n == static_cast<int>(bytes.size()) && rc == Z_OK, "write_idx: error writing '", path, "'");
  } else {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    VOLT_CHECK(out.good(), "write_idx: cannot create '", path, "': ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    VOLT_CHECK(out.good(), "write_idx: error writing '", path, "'");
  }
}

}  // namespace volt::data
