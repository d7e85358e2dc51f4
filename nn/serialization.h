#pragma once
/// @file
/// Checkpoint files: safetensors (https://huggingface.co/docs/safetensors) and JSON records.
///
/// safetensors layout: 8-byte little-endian u64 N, then N bytes of JSON header, then the raw data buffer.
/// The header maps each tensor name to {"dtype": "F32"|"F16"|"BF16"|"F64"|"I64"|"I32"|"U8"|"BOOL",
/// "shape": [...], "data_offsets": [begin, end]} (offsets relative to the data buffer), plus an optional
/// "__metadata__" string->string map. Volt writes tensors contiguously in StateDict order, and pads the header
/// with spaces to a multiple of 8 bytes so that the data buffer is aligned.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include <volt/nn/file_digest.h>
#include <volt/nn/module.h>
#include <volt/runtime/atomic_file.h>

namespace volt::nn {

/// Writes `tensors` (any device; copied to the host as needed) atomically to `path`. Names must be unique and
/// non-empty, tensors defined. Returns the size and CRC-32 of the bytes written (checkpoints record it).
FileDigest save_safetensors(const std::string& path, const StateDict& tensors,
                            const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file into CPU tensors, in data-offset order (the order they were saved in by Volt).
/// Throws volt::Error naming the file and the problem for truncated files, malformed headers, unknown dtypes,
/// and offsets that do not match the shapes or the data buffer.
StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

/// The atomic writer lives in runtime/atomic_file.h (one implementation for every output); these names keep
/// the nn:: spelling working.
using volt::atomic_write_file;
using volt::ByteSink;

/// Writes j.dump(2) and a newline with atomic_write_file.
void save_json_atomic(const std::string& path, const nlohmann::json& j);
nlohmann::json load_json(const std::string& path);

/// safetensors dtype names ("F32", ...) <-> DType.
const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& name);

}  // namespace volt::nn
