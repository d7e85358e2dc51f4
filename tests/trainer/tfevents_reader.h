#pragma once
// A reader for TensorBoard event files, written for the tests from the format description (independently of
// trainer/loggers/tfevents.cpp, which writes them): TFRecord framing with both masked CRC-32C checks, and the protobuf
// fields of Event, Summary.Value and the hparams plugin's session_start_info.
#include <bit>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <volt/trainer/loggers/tfevents.h>

namespace volt::test {

struct TfValue {
  std::string tag;
  bool has_simple_value = false;
  float simple_value = 0;
  std::string plugin_name;     // SummaryMetadata.plugin_data.plugin_name
  std::string plugin_content;  // SummaryMetadata.plugin_data.content
};

struct TfEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  bool has_summary = false;
  std::vector<TfValue> values;
};

// A google.protobuf.Value as the hparams plugin stores it: which field was set and its value.
struct TfHparam {
  enum Kind { none, number, string, boolean } kind = none;
  double number_value = 0;
  std::string string_value;
  bool bool_value = false;
};

// Protobuf wire-format reader; throws std::runtime_error on malformed input.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view s) : s_(s) {}
  bool done() const { return pos_ >= s_.size(); }
  // The next field's number and wire type.
  void next(int& field, int& wire) {
    const uint64_t key = varint();
    field = static_cast<int>(key >> 3);
    wire = static_cast<int>(key & 7);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto b = static_cast<unsigned char>(s_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  uint64_t fixed(int bytes) {
    need(bytes);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s_[pos_ + i])) << (8 * i);
    pos_ += bytes;
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    need(n);
    std::string_view out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 1) fixed(8);
    else if (wire == 2) bytes();
    else if (wire == 5) fixed(4);
    else throw std::runtime_error("unknown wire type " + std::to_string(wire));
  }
  void expect_wire(int wire, int want, const char* what) {
    if (wire != want)
      throw std::runtime_error(std::string(what) + ": wire type " + std::to_string(wire) + ", expected " +
                               std::to_string(want));
  }

 private:
  void need(uint64_t n) {
    if (n > s_.size() - pos_) throw std::runtime_error("truncated protobuf message");
  }
  std::string_view s_;
  size_t pos_ = 0;
};

inline uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// The records of an event file. Checks the masked CRC-32C of every length and every payload; throws
// std::runtime_error naming the record and what failed.
inline std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t at = 0;
  while (at < s.size()) {
    const std::string where = "record " + std::to_string(records.size()) + " at byte " + std::to_string(at);
    if (s.size() - at < 12) throw std::runtime_error(where + ": truncated header");
    const uint64_t len = read_le(s, at, 8);
    const auto len_crc = static_cast<uint32_t>(read_le(s, at + 8, 4));
    if (len_crc != masked_crc32c(s.data() + at, 8)) throw std::runtime_error(where + ": length CRC mismatch");
    if (s.size() - at - 12 < len + 4) throw std::runtime_error(where + ": truncated data");
    const std::string data = s.substr(at + 12, len);
    const auto data_crc = static_cast<uint32_t>(read_le(s, at + 12 + len, 4));
    if (data_crc != masked_crc32c(data.data(), data.size())) throw std::runtime_error(where + ": data CRC mismatch");
    records.push_back(data);
    at += 12 + len + 4;
  }
  return records;
}

inline TfValue parse_summary_value(std::string_view bytes) {
  TfValue v;
  ProtoReader r(bytes);
  while (!r.done()) {
    int field = 0, wire = 0;
    r.next(field, wire);
    if (field == 1) {
      r.expect_wire(wire, 2, "Summary.Value.tag");
      v.tag = std::string(r.bytes());
    } else if (field == 2) {
      r.expect_wire(wire, 5, "Summary.Value.simple_value");
      v.has_simple_value = true;
      v.simple_value = std::bit_cast<float>(static_cast<uint32_t>(r.fixed(4)));
    } else if (field == 9) {  // SummaryMetadata { PluginData plugin_data = 1 { plugin_name = 1; content = 2 } }
      r.expect_wire(wire, 2, "Summary.Value.metadata");
      ProtoReader md(r.bytes());
      while (!md.done()) {
        int f = 0, w = 0;
        md.next(f, w);
        if (f != 1) {
          md.skip(w);
          continue;
        }
        ProtoReader pd(md.bytes());
        while (!pd.done()) {
          int pf = 0, pw = 0;
          pd.next(pf, pw);
          if (pf == 1) v.plugin_name = std::string(pd.bytes());
          else if (pf == 2) v.plugin_content = std::string(pd.bytes());
          else pd.skip(pw);
        }
      }
    } else {
      r.skip(wire);
    }
  }
  return v;
}

inline TfEvent parse_event(std::string_view bytes) {
  TfEvent e;
  ProtoReader r(bytes);
  while (!r.done()) {
    int field = 0, wire = 0;
    r.next(field, wire);
    if (field == 1) {
      r.expect_wire(wire, 1, "Event.wall_time");
      e.wall_time = std::bit_cast<double>(r.fixed(8));
    } else if (field == 2) {
      r.expect_wire(wire, 0, "Event.step");
      e.step = static_cast<int64_t>(r.varint());
    } else if (field == 3) {
      r.expect_wire(wire, 2, "Event.file_version");
      e.file_version = std::string(r.bytes());
    } else if (field == 5) {
      r.expect_wire(wire, 2, "Event.summary");
      e.has_summary = true;
      ProtoReader sr(r.bytes());
      while (!sr.done()) {
        int f = 0, w = 0;
        sr.next(f, w);
        if (f == 1) e.values.push_back(parse_summary_value(sr.bytes()));
        else sr.skip(w);
      }
    } else {
      r.skip(wire);
    }
  }
  return e;
}

inline std::vector<TfEvent> read_events(const std::string& path) {
  std::vector<TfEvent> out;
  for (const auto& rec : read_tfrecords(path)) out.push_back(parse_event(rec));
  return out;
}

// HParamsPluginData { SessionStartInfo session_start_info = 3 { map<string, Value> hparams = 1;
// double start_time_secs = 5; } } -> the hparams map.
inline std::map<std::string, TfHparam> parse_session_start_hparams(std::string_view content,
                                                                   double* start_time = nullptr) {
  std::map<std::string, TfHparam> out;
  ProtoReader r(content);
  bool found = false;
  while (!r.done()) {
    int field = 0, wire = 0;
    r.next(field, wire);
    if (field != 3) {
      r.skip(wire);
      continue;
    }
    found = true;
    ProtoReader ssi(r.bytes());
    while (!ssi.done()) {
      int f = 0, w = 0;
      ssi.next(f, w);
      if (f == 5) {
        ssi.expect_wire(w, 1, "SessionStartInfo.start_time_secs");
        const double t = std::bit_cast<double>(ssi.fixed(8));
        if (start_time) *start_time = t;
        continue;
      }
      if (f != 1) {
        ssi.skip(w);
        continue;
      }
      ProtoReader entry(ssi.bytes());
      std::string key;
      TfHparam value;
      while (!entry.done()) {
        int ef = 0, ew = 0;
        entry.next(ef, ew);
        if (ef == 1) {
          key = std::string(entry.bytes());
        } else if (ef == 2) {
          ProtoReader pv(entry.bytes());  // google.protobuf.Value
          while (!pv.done()) {
            int vf = 0, vw = 0;
            pv.next(vf, vw);
            if (vf == 2) {
              value.kind = TfHparam::number;
              value.number_value = std::bit_cast<double>(pv.fixed(8));
            } else if (vf == 3) {
              value.kind = TfHparam::string;
              value.string_value = std::string(pv.bytes());
            } else if (vf == 4) {
              value.kind = TfHparam::boolean;
              value.bool_value = pv.varint() != 0;
            } else {
              pv.skip(vw);
            }
          }
        } else {
          entry.skip(ew);
        }
      }
      out[key] = value;
    }
  }
  if (!found) throw std::runtime_error("HParamsPluginData without session_start_info");
  return out;
}

}  // namespace volt::test
