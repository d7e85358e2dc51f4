// Sharded checkpoints read one tensor at a time (sharded_stream.h), and load_rank_shards (sharded.h) over the
// same checks.
#include <volt/trainer/checkpoint/sharded_stream.h>

#include <filesystem>

#include <volt/kernels/ops.h>
#include <volt/runtime/error.h>

namespace volt {

namespace fs = std::filesystem;

std::unique_ptr<nn::SafetensorsReader> open_rank_shards(const std::string& stem, const ShardedLayout& layout, int rank) {
  VOLT_CHECK(rank >= 0 && rank < layout.world_size, "sharded checkpoint ", stem, ": rank ", rank,
             " is outside the world of ", layout.world_size, " that wrote it");
  const std::string f = (fs::path(shards_dir(stem)) / shard_file_name(rank, layout.world_size)).string();
  auto reader = std::make_unique<nn::SafetensorsReader>(f);
  std::map<std::string, std::string> meta = reader->metadata();
  VOLT_CHECK(meta["format"] == "volt-checkpoint-shard" && meta["rank"] == std::to_string(rank) &&
                 meta["world_size"] == std::to_string(layout.world_size),
             "sharded checkpoint: ", f, " is not rank ", rank, " of ", layout.world_size,
             "'s shard file (its metadata says format \"", meta["format"], "\", rank \"", meta["rank"],
             "\", world_size \"", meta["world_size"], "\")");
  for (const auto& b : layout.buffers) {
    const nn::SafetensorsReader::Entry* e = reader->find(b.key);
    VOLT_CHECK(e != nullptr, "sharded checkpoint: ", f, " has no tensor '", b.key, "' that the record ", stem,
               ".json lists");
    VOLT_CHECK(e->shape.size() == 1 && e->shape[0] == b.chunk && e->dtype == b.dtype, "sharded checkpoint: ", f, ": '",
               b.key, "' is ", dtype_name(e->dtype), " ", shape_to_string(e->shape), " but the record ", stem,
               ".json says (", b.chunk, ",) ", dtype_name(b.dtype));
  }
  VOLT_CHECK(reader->entries().size() == layout.buffers.size(), "sharded checkpoint: ", f, " holds ",
             reader->entries().size(), " tensors but the record ", stem, ".json lists ", layout.buffers.size(),
             " buffers");
  return reader;
}

std::map<std::string, Tensor> load_rank_shards(const std::string& stem, const ShardedLayout& layout, int rank) {
  auto reader = open_rank_shards(stem, layout, rank);
  std::map<std::string, Tensor> out;
  for (const auto& e : reader->entries()) out.emplace(e.name, reader->read(e));
  return out;
}

Tensor zero_placeholder(const Shape& shape, DType dtype, Device device) {
  Shape ones(shape.size(), 1);
  return zeros(ones, dtype, device).expand(shape);
}

}  // namespace volt
