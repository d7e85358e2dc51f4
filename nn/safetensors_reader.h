#pragma once
/// @file
/// A safetensors file read one tensor at a time (nn/serialization.h's load_safetensors reads them all through
/// it). Opening parses and checks the header exactly as load_safetensors does (truncation, malformed header,
/// unknown dtypes, offsets that do not match the shapes or the data buffer, gaps and overlaps); reading a
/// tensor then holds only that tensor in memory, so a checkpoint far larger than the free memory can be loaded
/// into tensors that already exist (trainer/checkpoint/sharded.h).
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <volt/kernels/tensor.h>

namespace volt::nn {

class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
    uint64_t begin = 0, end = 0;  ///< byte offsets into the data buffer
  };
  /// Throws volt::Error naming the file and the problem (the messages of load_safetensors).
  explicit SafetensorsReader(const std::string& path);
  const std::string& path() const { return path_; }
  /// Every tensor, in data-offset order (the order Volt saved them in).
  const std::vector<Entry>& entries() const { return entries_; }
  /// The "__metadata__" strings.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The entry named `name`, or nullptr.
  const Entry* find(const std::string& name) const;
  /// Reads `e` into a new CPU tensor.
  Tensor read(const Entry& e);
  /// Reads `e` into `out` (any device; shape and dtype must be e's): straight into its memory when it is a
  /// contiguous CPU tensor, else through one temporary CPU tensor of e's size.
  void read_into(const Entry& e, Tensor& out);
  /// Reads elements [first, first + count) of `e` (row-major, as if flattened) into `out`, a (count,) tensor of
  /// e's dtype on any device: only those bytes are read from the file, straight into `out` when it is a
  /// contiguous CPU tensor, else through one temporary CPU tensor of `count` elements. A range outside the
  /// tensor is a volt::Error.
  void read_range_into(const Entry& e, int64_t first, int64_t count, Tensor& out);

 private:
  void read_bytes(const Entry& e, uint64_t begin, uint64_t end, void* dst);  ///< [begin, end) of e's bytes
  std::string path_;
  std::ifstream in_;
  uint64_t data_start_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace volt::nn
