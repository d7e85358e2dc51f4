#pragma once
// The bytes of TensorBoard event files (events.out.tfevents.*), written by TensorBoardLogger.
//
// A file is a sequence of TFRecords, each
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
// with mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, and each record's data is one serialized
// tensorflow.Event protobuf:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; SummaryMetadata metadata = 9; }
// The first record of a file is the Event with file_version "brain.Event:2".
//
// The few messages are encoded by hand (a varint / length-delimited writer in tfevents.cpp) instead of with
// libprotobuf: that would add a heavy build and link dependency, generated code and a protoc step for five
// small messages that never change.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace volt {

// Extends a running CRC-32C (Castagnoli polynomial, reflected 0x82F63B78; start from 0) with n bytes:
// crc32c_update(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);
// The TFRecord checksum: the CRC-32C of the bytes, rotated right by 15 and offset by 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord: the framing above around `data`.
std::string tfrecord(std::string_view data);

// Serialized Event messages.
// The first record of every event file: wall_time and file_version "brain.Event:2".
std::string file_version_event(double wall_time);
// One Summary with a simple_value per metric (tag = the metric's name), in the map's (sorted) order.
std::string scalars_event(double wall_time, int64_t step, const std::map<std::string, double>& metrics);
// The hparams plugin's session_start_info summary (tag "_hparams_/session_start_info", plugin "hparams",
// content = HParamsPluginData { SessionStartInfo session_start_info = 3 }) at step 0. Each entry of the JSON
// object `hparams` becomes SessionStartInfo.hparams[key] (a google.protobuf.Value): numbers as number_value,
// strings as string_value, booleans as bool_value, anything else as its JSON text; nested objects are flattened
// with "/" between the keys ({"opt": {"lr": 0.1}} -> "opt/lr"). `start_time` fills start_time_secs.
std::string hparams_event(double wall_time, const nlohmann::json& hparams, double start_time);

}  // namespace volt
