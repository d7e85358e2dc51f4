#pragma once
/// @file
/// Sharded checkpoints: each rank writes only the slices it owns (TrainerOptions::checkpoint_layout = sharded).
///
/// On disk, for a checkpoint `<stem>` written by `w` ranks:
/// @code{.unparsed}
///   <stem>.safetensors                 rank 0: every tensor that is not sharded (the module's state_dict, the
///                                      optimizers' step counts), in the full layout's names
///   <stem>.shards/rank-<r>-of-<w>.safetensors
///                                      rank r: its (chunk,) slice of every flat buffer, named by the buffer
///   <stem>.json                        rank 0, last: the trainer-state record, plus "sharded": the layout record
/// @endcode
/// The layout record is generic: flat buffers and their slot tables, nothing specific to an optimizer, so any
/// strategy that keeps tensors as slices of flat padded buffers (the ZeRO optimizer state, FSDP's parameter
/// shards) is written and consolidated the same way, without running the model:
/// @code{.unparsed}
///   "sharded": {"version": 1, "world_size": w, "strategy": "zero2",
///               "files": [{"file": "rank-0-of-w.safetensors", "digest": {"bytes": N, "crc32": C}}, ...],
///               "order": [every tensor name of the full layout, in the order the full checkpoint writes them],
///               "buffers": [{"key": "optimizer.0.flat.0.0.exp_avg", "numel": 9, "chunk": 3, "dtype": "F64",
///                            "slots": [{"key": "optimizer.0.state.0.2.exp_avg", "offset": 0, "shape": [3]}, ...]}]}
/// @endcode
/// A buffer holds `numel` values, zero-padded to `w * chunk` with `chunk = ceil(numel / w)`; rank r's file holds
/// `[r * chunk, (r + 1) * chunk)` under the buffer's key. Slot s of a buffer is the full-layout tensor `s.key` of
/// shape `s.shape`, stored at `[s.offset, s.offset + prod(s.shape))`.
///
/// Writing is crash-safe like the full layout: rank 0 removes an old record first, every rank writes its file
/// atomically, the digests reach rank 0, rank 0 writes `<stem>.safetensors`, removes shard files of another
/// world size, and writes the record last. A checkpoint is complete only once its record exists.
///
/// Reading checks the record against the files: every rank's file must exist with the recorded size and CRC-32,
/// no file of another world size may sit beside them, and each file must hold exactly the recorded buffers as
/// (chunk,) tensors of the recorded dtype; anything else is a volt::Error naming the file.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <volt/kernels/tensor.h>
#include <volt/nn/file_digest.h>
#include <volt/nn/module.h>

namespace volt {

/// One tensor of the full layout inside a flat buffer.
struct FlatSlot {
  std::string key;             ///< its name in the full layout
  int64_t offset = 0;          ///< in elements, into the buffer
  std::vector<int64_t> shape;  ///< its shape; it spans prod(shape) elements from offset
  bool operator==(const FlatSlot&) const = default;
};

/// A flat buffer of `numel` values padded to (world * chunk,): its slot table and (when written or read) one
/// rank's (chunk,) slice.
struct FlatShard {
  std::string key;  ///< the buffer's name in the rank files
  int64_t numel = 0;
  int64_t chunk = 0;
  DType dtype = DType::f32;
  std::vector<FlatSlot> slots;
  Tensor shard;  ///< (chunk,) one rank's slice; undefined in a layout parsed from a record
  /// The same layout (key, sizes, dtype, slots), whatever the tensors.
  bool same_layout(const FlatShard& o) const {
    return key == o.key && numel == o.numel && chunk == o.chunk && dtype == o.dtype && slots == o.slots;
  }
};

/// The parsed "sharded" record of `<stem>.json`.
struct ShardedLayout {
  int world_size = 1;
  std::string strategy;             ///< the strategy that wrote it (informational)
  std::vector<std::string> order;   ///< every full-layout tensor name, in the full checkpoint's order
  std::vector<FlatShard> buffers;   ///< without tensors
  std::vector<nn::FileDigest> files;  ///< per rank
};

/// `"rank-<rank>-of-<world>.safetensors"`.
std::string shard_file_name(int rank, int world);
/// `"<stem>.shards"`.
std::string shards_dir(const std::string& stem);
/// True for `"rank-<r>-of-<w>.safetensors"` (sets rank and world).
bool parse_shard_file_name(const std::string& name, int& rank, int& world);

/// True when a parsed `<stem>.json` has a "sharded" layout record.
bool is_sharded_record(const nlohmann::json& record);
/// Validates the "sharded" record of `record` (offsets and shapes inside each buffer, chunk = ceil(numel /
/// world_size), one file per rank, every slot named in "order"); `source` names the file in errors.
ShardedLayout parse_sharded_record(const nlohmann::json& record, const std::string& source);
nlohmann::json sharded_record_to_json(const ShardedLayout& layout);

/// Writes this rank's slices of `buffers` to `<stem>.shards/rank-<rank>-of-<world>.safetensors` (atomically,
/// creating the folder) and returns the file's digest. Local: no communication.
nn::FileDigest write_rank_shards(const std::string& stem, int rank, int world, const std::vector<FlatShard>& buffers);
/// Rank 0, after every rank wrote its file and before the record: removes rank files of other world sizes.
void remove_stale_shard_files(const std::string& stem, int world);

/// Checks that every rank's file exists and that no file of another world size is there, and verifies the
/// recorded digest of rank `verify_rank`'s file (-1: of every file). Throws volt::Error naming the file.
void check_shard_files(const std::string& stem, const ShardedLayout& layout, int verify_rank = -1);
/// Rank `rank`'s slices: buffer key -> (chunk,) tensor, checked against the record (no missing, extra,
/// mis-shaped or mis-typed tensor).
std::map<std::string, Tensor> load_rank_shards(const std::string& stem, const ShardedLayout& layout, int rank);
/// The full layout in memory: `<stem>.safetensors` plus every buffer put back together from all rank files,
/// in `layout.order` (the order the full checkpoint writes). Throws when the pieces do not cover the order.
nn::StateDict consolidate_tensors(const std::string& stem, const ShardedLayout& layout);

/// Writes `<out_stem>.safetensors` and `<out_stem>.json`: the full checkpoint the same run would have written
/// with checkpoint_layout = full (byte for byte: the same tensors, order and record, minus "sharded"). A full
/// checkpoint as input is copied through the same path. `out_stem` must differ from `in_stem`.
void consolidate_checkpoint(const std::string& in_stem, const std::string& out_stem);

/// Removes `<stem>.shards` and its rank files (ModelCheckpoint's top-k rotation). Errors are ignored.
void remove_shards_dir(const std::string& stem);

}  // namespace volt
