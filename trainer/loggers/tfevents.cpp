#include <volt/trainer/loggers/tfevents.h>

#include <array>
#include <bit>

namespace volt {

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Just enough of the protobuf wire format: varints (wire type 0), fixed64 (1), length-delimited (2), fixed32 (5).
struct ProtoWriter {
  std::string out;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
  void int_field(int field, int64_t v) {
    tag(field, 0);
    varint(static_cast<uint64_t>(v));
  }
  void double_field(int field, double v) {
    tag(field, 1);
    put_le(out, std::bit_cast<uint64_t>(v), 8);
  }
  void float_field(int field, float v) {
    tag(field, 5);
    put_le(out, std::bit_cast<uint32_t>(v), 4);
  }
  void bytes_field(int field, std::string_view s) {
    tag(field, 2);
    varint(s.size());
    out.append(s);
  }
};

std::string event(double wall_time, int64_t step, int what_field, std::string_view what) {
  ProtoWriter e;
  e.double_field(1, wall_time);
  e.int_field(2, step);
  e.bytes_field(what_field, what);
  return e.out;
}

// google.protobuf.Value: number_value = 2, string_value = 3, bool_value = 4.
std::string proto_value(const nlohmann::json& v) {
  ProtoWriter w;
  if (v.is_boolean()) w.int_field(4, v.get<bool>() ? 1 : 0);
  else if (v.is_number()) w.double_field(2, v.get<double>());
  else if (v.is_string()) w.bytes_field(3, v.get<std::string>());
  else w.bytes_field(3, v.dump());
  return w.out;
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "/" + it.key();
    if (it->is_object() && !it->empty()) flatten(*it, key, out);
    else out[key] = *it;
  }
}

}  // namespace

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c_update(0, data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  ProtoWriter e;
  e.double_field(1, wall_time);
  e.bytes_field(3, "brain.Event:2");
  return e.out;
}

std::string scalars_event(double wall_time, int64_t step, const std::map<std::string, double>& metrics) {
  ProtoWriter summary;
  for (const auto& [tag, v] : metrics) {
    ProtoWriter value;
    value.bytes_field(1, tag);
    value.float_field(2, static_cast<float>(v));  // simple_value is a float in the Summary proto
    summary.bytes_field(1, value.out);
  }
  return event(wall_time, step, 5, summary.out);
}

std::string hparams_event(double wall_time, const nlohmann::json& hparams, double start_time) {
  std::map<std::string, nlohmann::json> flat;
  if (hparams.is_object()) flatten(hparams, "", flat);
  ProtoWriter ssi;  // SessionStartInfo { map<string, Value> hparams = 1; double start_time_secs = 5; }
  for (const auto& [k, v] : flat) {
    ProtoWriter entry;  // a map entry is a message { key = 1; value = 2; }
    entry.bytes_field(1, k);
    entry.bytes_field(2, proto_value(v));
    ssi.bytes_field(1, entry.out);
  }
  ssi.double_field(5, start_time);
  ProtoWriter plugin_data;  // HParamsPluginData { int32 version = 1 (0, omitted); session_start_info = 3; }
  plugin_data.bytes_field(3, ssi.out);
  ProtoWriter plugin;  // SummaryMetadata.PluginData { string plugin_name = 1; bytes content = 2; }
  plugin.bytes_field(1, "hparams");
  plugin.bytes_field(2, plugin_data.out);
  ProtoWriter metadata;  // SummaryMetadata { PluginData plugin_data = 1; }
  metadata.bytes_field(1, plugin.out);
  ProtoWriter value;  // Summary.Value { tag = 1; metadata = 9; } (no value: the plugin reads the metadata)
  value.bytes_field(1, "_hparams_/session_start_info");
  value.bytes_field(9, metadata.out);
  ProtoWriter summary;
  summary.bytes_field(1, value.out);
  return event(wall_time, 0, 5, summary.out);
}

}  // namespace volt
