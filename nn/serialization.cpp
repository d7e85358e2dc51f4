#include <volt/nn/serialization.h>
#include <volt/nn/safetensors_reader.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <unordered_set>

namespace volt::nn {

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::i8: return "I8";
    case DType::boolean: return "BOOL";
  }
  VOLT_FAIL("safetensors: unsupported dtype");
}

DType parse_safetensors_dtype(const std::string& s) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"F64", DType::f64},
      {"I64", DType::i64}, {"I32", DType::i32}, {"U8", DType::u8}, {"I8", DType::i8},     {"BOOL", DType::boolean}};
  for (const auto& [name, dt] : table)
    if (s == name) return dt;
  VOLT_FAIL("safetensors: unsupported dtype '", s, "'; expected F32, F16, BF16, F64, I64, I32, U8, I8 or BOOL");
}

// ---- JSON ----------------------------------------------------------------------------------------------------

void save_json_atomic(const std::string& path, const nlohmann::json& j) { atomic_write_file(path, j.dump(2) + "\n"); }

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  VOLT_CHECK(in.good(), "load_json: cannot open '", path, "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    VOLT_FAIL("load_json: '", path, "' is not valid JSON: ", e.what());
  }
}

// ---- safetensors --------------------------------------------------------------------------------------------

FileDigest save_safetensors(const std::string& path, const StateDict& tensors,
                            const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::unordered_set<std::string> names;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    VOLT_CHECK(!name.empty() && name != "__metadata__", "save_safetensors: invalid tensor name '", name, "'");
    VOLT_CHECK(names.insert(name).second, "save_safetensors: duplicate tensor name '", name, "'");
    VOLT_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    Tensor h = t.detach().contiguous().cpu();
    const uint64_t n = h.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    host.push_back(std::move(h));
  }
  std::string hs = header.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  FileDigest digest;
  atomic_write_file(path, [&](const ByteSink& sink) {
    // The digest covers exactly the bytes that reach the file, without reading them back.
    auto write = [&](const void* p, size_t n) {
      digest.crc32 = crc32_update(digest.crc32, p, n);
      digest.bytes += n;
      sink(p, n);
    };
    unsigned char len[8];
    uint64_t n = hs.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    write(len, 8);
    write(hs.data(), hs.size());
    for (const auto& h : host) write(h.data_ptr(), h.nbytes());
  });
  return digest;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  std::ifstream& in = in_;
  VOLT_CHECK(in.good(), "load_safetensors: cannot open '", path, "'");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  VOLT_CHECK(file_size >= 8, "load_safetensors: '", path, "' is truncated: ", file_size,
             " bytes, expected at least the 8-byte header length");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len[i]) << (8 * i);
  VOLT_CHECK(header_len <= file_size - 8, "load_safetensors: '", path, "' is truncated or corrupt: header length ",
             header_len, " exceeds the ", file_size - 8, " bytes after the length field");
  std::string hs(header_len, '\0');
  in.read(hs.data(), static_cast<std::streamsize>(header_len));
  VOLT_CHECK(in.good(), "load_safetensors: reading the header of '", path, "' failed");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hs);
  } catch (const nlohmann::json::exception& e) {
    VOLT_FAIL("load_safetensors: '", path, "' has a corrupt JSON header: ", e.what());
  }
  VOLT_CHECK(header.is_object(), "load_safetensors: '", path, "': the header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_len;

  std::vector<Entry>& entries = entries_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      VOLT_CHECK(v.is_object(), "load_safetensors: '", path, "': __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        VOLT_CHECK(m.value().is_string(), "load_safetensors: '", path, "': __metadata__ value of '", m.key(),
                   "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { VOLT_FAIL("load_safetensors: '", path, "': tensor '", name, "' ", what); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) bad("has a non-string dtype");
    Entry e{name, parse_safetensors_dtype(v["dtype"].get<std::string>()), {}, 0, 0};
    if (!v["shape"].is_array()) bad("has a shape that is not an array");
    int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("has a shape entry " + d.dump() + " that is not a non-negative integer");
      if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad("has a shape entry " + d.dump() + " above 2^63 - 1");
      e.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(numel, e.shape.back(), &numel))
        bad("has shape " + v["shape"].dump() + " whose element count overflows 64 bits; the data buffer has " +
            std::to_string(data_size) + " bytes");
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("needs data_offsets [begin, end] of non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      bad("has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] outside the " +
          std::to_string(data_size) + "-byte data buffer (file truncated?)");
    uint64_t want = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(itemsize(e.dtype)), &want))
      bad("has shape " + v["shape"].dump() + " of " + v["dtype"].get<std::string>() +
          " whose byte count overflows 64 bits; the data buffer has " + std::to_string(data_size) + " bytes");
    if (e.end - e.begin != want)
      bad("spans " + std::to_string(e.end - e.begin) + " bytes but shape " + shape_to_string(e.shape) + " of " +
          v["dtype"].get<std::string>() + " needs " + std::to_string(want));
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expect = 0;
  for (const auto& e : entries) {
    VOLT_CHECK(e.begin == expect, "load_safetensors: '", path, "': tensor '", e.name, "' starts at byte ", e.begin,
               " but the previous tensor ends at ", expect, " (overlapping or non-contiguous data)");
    expect = e.end;
  }
  VOLT_CHECK(expect == data_size, "load_safetensors: '", path, "': the tensors cover ", expect,
             " bytes but the data buffer has ", data_size);

  data_start_ = 8 + header_len;
}

const SafetensorsReader::Entry* SafetensorsReader::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void SafetensorsReader::read_bytes(const Entry& e, uint64_t begin, uint64_t end, void* dst) {
  if (end == begin) return;
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(data_start_ + e.begin + begin));
  in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(end - begin));
  VOLT_CHECK(in_.good(), "load_safetensors: reading tensor '", e.name, "' from '", path_, "' failed");
}

Tensor SafetensorsReader::read(const Entry& e) {
  Tensor t = empty(e.shape, e.dtype);
  read_bytes(e, 0, e.end - e.begin, t.data_ptr());
  return t;
}

void SafetensorsReader::read_into(const Entry& e, Tensor& out) {
  VOLT_CHECK(out.defined() && out.shape() == e.shape && out.dtype() == e.dtype, "load_safetensors: '", path_,
             "': tensor '", e.name, "' is ", dtype_name(e.dtype), " ", shape_to_string(e.shape), " but it is read into ",
             out.defined() ? std::string(dtype_name(out.dtype())) + " " + out.shape_str() : std::string("an undefined tensor"));
  if (out.device().is_cpu() && out.is_contiguous()) {
    read_bytes(e, 0, e.end - e.begin, out.data_ptr());
    return;
  }
  NoGradGuard ng;
  out.copy_(read(e));
}

void SafetensorsReader::read_range_into(const Entry& e, int64_t first, int64_t count, Tensor& out) {
  const int64_t n = shape_numel(e.shape);
  VOLT_CHECK(first >= 0 && count >= 0 && first <= n && count <= n - first, "load_safetensors: '", path_,
             "': elements [", first, ", ", first + count, ") of tensor '", e.name, "' requested, but it holds ", n);
  VOLT_CHECK(out.defined() && out.dim() == 1 && out.size(0) == count && out.dtype() == e.dtype, "load_safetensors: '",
             path_, "': ", count, " elements of tensor '", e.name, "' (", dtype_name(e.dtype), ") are read into ",
             out.defined() ? std::string(dtype_name(out.dtype())) + " " + out.shape_str() : std::string("an undefined tensor"),
             "; expected a (", count, ",) ", dtype_name(e.dtype), " tensor");
  const uint64_t item = itemsize(e.dtype);
  const uint64_t begin = static_cast<uint64_t>(first) * item, end = static_cast<uint64_t>(first + count) * item;
  if (out.device().is_cpu() && out.is_contiguous()) {
    read_bytes(e, begin, end, out.data_ptr());
    return;
  }
  Tensor tmp = empty({count}, e.dtype);
  read_bytes(e, begin, end, tmp.data_ptr());
  NoGradGuard ng;
  out.copy_(tmp);
}

StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  SafetensorsReader reader(path);
  if (metadata)
    for (const auto& [k, v] : reader.metadata()) (*metadata)[k] = v;
  StateDict out;
  out.reserve(reader.entries().size());
  for (const auto& e : reader.entries()) out.emplace_back(e.name, reader.read(e));
  return out;
}

}  // namespace volt::nn
