#pragma once
/// @file
/// Sharded checkpoints read one tensor at a time (trainer/checkpoint/sharded.h): a resume at the same world
/// size under a strategy whose shards are laid out as recorded never holds more than this rank's shards (the
/// optimizer state it keeps anyway) plus one tensor in host memory. The state is first loaded from zero-sized
/// placeholders (which run every check of the full path: names, shapes, dtypes, the layout) and then filled in
/// place from the files, one tensor at a time. benchmarks/bench_sharded_load.cpp measures it.
#include <memory>
#include <string>

#include <volt/nn/safetensors_reader.h>
#include <volt/trainer/checkpoint/sharded.h>

namespace volt {

/// Rank `rank`'s shard file opened for reading tensor by tensor, checked as load_rank_shards checks it (its
/// metadata names this rank and world size, it holds exactly the recorded buffers as (chunk,) tensors of the
/// recorded dtype) without reading any tensor. Throws volt::Error naming the file.
std::unique_ptr<nn::SafetensorsReader> open_rank_shards(const std::string& stem, const ShardedLayout& layout, int rank);

/// A tensor of `shape` and `dtype` that holds one value (zero) on `device`: every element views it (stride 0).
/// Loaded through Module::load_state_dict or Optimizer::load_state_dict it runs their checks and allocates
/// nothing beyond what the destination keeps.
Tensor zero_placeholder(const Shape& shape, DType dtype, Device device);

}  // namespace volt
