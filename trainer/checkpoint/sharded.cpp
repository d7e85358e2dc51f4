// Sharded checkpoints: the layout record, the rank files, and their consolidation into the full layout.
#include <volt/trainer/checkpoint/sharded.h>

#include <filesystem>
#include <set>

#include <volt/kernels/ops.h>
#include <volt/nn/serialization.h>
#include <volt/runtime/error.h>
#include <volt/trainer/checkpoint/locate.h>

namespace volt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kMaxWorld = 1 << 20;

}  // namespace

bool parse_shard_file_name(const std::string& f, int& rank, int& world) {
  static const std::string kPre = "rank-", kMid = "-of-", kExt = ".safetensors";
  if (f.rfind(kPre, 0) != 0 || f.size() <= kExt.size() ||
      f.compare(f.size() - kExt.size(), kExt.size(), kExt) != 0)
    return false;
  const std::string core = f.substr(kPre.size(), f.size() - kPre.size() - kExt.size());
  const size_t mid = core.find(kMid);
  if (mid == std::string::npos) return false;
  auto number = [](const std::string& s, int& out) {
    if (s.empty() || s.size() > 7) return false;
    for (char c : s)
      if (c < '0' || c > '9') return false;
    out = std::stoi(s);
    return true;
  };
  return number(core.substr(0, mid), rank) && number(core.substr(mid + kMid.size()), world);
}

namespace {

const json& need(const json& obj, const char* key, const std::string& where, const std::string& source) {
  VOLT_CHECK(obj.is_object() && obj.contains(key), "sharded checkpoint ", source, ": '", where, "' has no key '", key,
             "'");
  return obj.at(key);
}

int64_t need_count(const json& obj, const char* key, const std::string& where, const std::string& source, int64_t lo,
                   int64_t hi) {
  const json& v = need(obj, key, where, source);
  VOLT_CHECK(v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(hi)) &&
                 v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
             "sharded checkpoint ", source, ": '", where, ".", key, "' = ", v.dump(), "; expected an integer from ", lo,
             " to ", hi);
  return v.get<int64_t>();
}

std::string need_string(const json& obj, const char* key, const std::string& where, const std::string& source) {
  const json& v = need(obj, key, where, source);
  VOLT_CHECK(v.is_string() && !v.get<std::string>().empty(), "sharded checkpoint ", source, ": '", where, ".", key,
             "' must be a non-empty string, got ", v.dump());
  return v.get<std::string>();
}

}  // namespace

std::string shard_file_name(int rank, int world) {
  return "rank-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

std::string shards_dir(const std::string& stem) { return stem + ".shards"; }

bool is_sharded_record(const json& record) { return record.is_object() && record.contains("sharded"); }

namespace {

// 'sharded.files': one file per rank, named for its rank, with its digest.
std::vector<nn::FileDigest> parse_shard_files(const json& s, int world_size, const std::string& source) {
  const json& files = need(s, "files", "sharded", source);
  VOLT_CHECK(files.is_array() && files.size() == static_cast<size_t>(world_size), "sharded checkpoint ", source,
             ": 'sharded.files' must list one file per rank (", world_size, "), got ", files.dump().substr(0, 80));
  std::vector<nn::FileDigest> out;
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string where = "sharded.files[" + std::to_string(r) + "]";
    const std::string f = need_string(files[r], "file", where, source);
    VOLT_CHECK(f == shard_file_name(static_cast<int>(r), world_size), "sharded checkpoint ", source, ": '", where,
               ".file' is \"", f, "\"; expected \"", shard_file_name(static_cast<int>(r), world_size), "\"");
    out.push_back(nn::digest_from_json(need(files[r], "digest", where, source), source + " (" + where + ")"));
  }
  return out;
}

// 'sharded.order': distinct, non-empty tensor names; `named` receives them.
std::vector<std::string> parse_shard_order(const json& s, const std::string& source, std::set<std::string>& named) {
  const json& order = need(s, "order", "sharded", source);
  VOLT_CHECK(order.is_array(), "sharded checkpoint ", source, ": 'sharded.order' must be an array of tensor names");
  std::vector<std::string> out;
  for (const auto& k : order) {
    VOLT_CHECK(k.is_string() && !k.get<std::string>().empty(), "sharded checkpoint ", source,
               ": 'sharded.order' holds ", k.dump(), "; expected tensor names");
    VOLT_CHECK(named.insert(k.get<std::string>()).second, "sharded checkpoint ", source, ": 'sharded.order' names '",
               k.get<std::string>(), "' twice");
    out.push_back(k.get<std::string>());
  }
  return out;
}

// One slot of buffer `b` (at `sw`): a tensor named in 'sharded.order', in no other buffer (`slot_keys`), whose
// shape fits in the buffer from its offset.
FlatSlot parse_shard_slot(const json& slot, const std::string& sw, const FlatShard& b, const std::string& source,
                          const std::set<std::string>& named, std::set<std::string>& slot_keys) {
  FlatSlot sl;
  sl.key = need_string(slot, "key", sw, source);
  sl.offset = need_count(slot, "offset", sw, source, 0, b.numel);
  const json& shape = need(slot, "shape", sw, source);
  VOLT_CHECK(shape.is_array() && shape.size() <= 16, "sharded checkpoint ", source, ": '", sw,
             ".shape' must be an array of sizes");
  bool empty_shape = false;
  for (const auto& d : shape) {
    VOLT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= (uint64_t{1} << 40), "sharded checkpoint ", source,
               ": '", sw, ".shape' holds ", d.dump(), "; expected sizes >= 0");
    sl.shape.push_back(d.get<int64_t>());
    empty_shape = empty_shape || sl.shape.back() == 0;
  }
  int64_t n = empty_shape ? 0 : 1;  // prod(shape), checked against the room left in the buffer as it grows
  for (size_t k = 0; n > 0 && k < sl.shape.size(); ++k) {
    VOLT_CHECK(n <= (b.numel - sl.offset) / sl.shape[k], "sharded checkpoint ", source, ": slot '", sl.key,
               "' of shape ", nlohmann::json(sl.shape).dump(), " at offset ", sl.offset, " does not fit in buffer '",
               b.key, "' of ", b.numel, " values");
    n *= sl.shape[k];
  }
  VOLT_CHECK(named.count(sl.key), "sharded checkpoint ", source, ": slot '", sl.key,
             "' is not named in 'sharded.order'");
  VOLT_CHECK(slot_keys.insert(sl.key).second, "sharded checkpoint ", source, ": slot '", sl.key,
             "' appears in two buffers");
  return sl;
}

// One entry of 'sharded.buffers' (at `where`): a distinct key, sizes that split over `world_size` ranks, a dtype
// and its slots.
FlatShard parse_shard_buffer(const json& buffer, const std::string& where, int world_size, const std::string& source,
                             const std::set<std::string>& named, std::set<std::string>& keys,
                             std::set<std::string>& slot_keys) {
  FlatShard b;
  b.key = need_string(buffer, "key", where, source);
  VOLT_CHECK(keys.insert(b.key).second, "sharded checkpoint ", source, ": buffer '", b.key, "' appears twice");
  // Bounds keep every product below (chunk * world_size, sizes within numel) far from overflowing.
  b.numel = need_count(buffer, "numel", where, source, 0, int64_t{1} << 40);
  b.chunk = need_count(buffer, "chunk", where, source, 0, int64_t{1} << 40);
  VOLT_CHECK(b.chunk == (b.numel + world_size - 1) / world_size,
             "sharded checkpoint ", source, ": buffer '", b.key, "' has numel ", b.numel, " and chunk ", b.chunk,
             "; expected chunk = ceil(numel / world_size) with world_size ", world_size);
  const std::string dt = need_string(buffer, "dtype", where, source);
  try {
    b.dtype = nn::parse_safetensors_dtype(dt);
  } catch (const Error& e) {
    VOLT_FAIL("sharded checkpoint ", source, ": buffer '", b.key, "' has dtype \"", dt, "\": ", e.what());
  }
  const json& slots = need(buffer, "slots", where, source);
  VOLT_CHECK(slots.is_array(), "sharded checkpoint ", source, ": '", where, ".slots' must be an array");
  for (size_t j = 0; j < slots.size(); ++j)
    b.slots.push_back(
        parse_shard_slot(slots[j], where + ".slots[" + std::to_string(j) + "]", b, source, named, slot_keys));
  return b;
}

}  // namespace

ShardedLayout parse_sharded_record(const json& record, const std::string& source) {
  VOLT_CHECK(is_sharded_record(record), "sharded checkpoint ", source, ": the record has no \"sharded\" layout");
  const json& s = record.at("sharded");
  VOLT_CHECK(s.is_object(), "sharded checkpoint ", source, ": 'sharded' must be an object, got ", s.type_name());
  ShardedLayout out;
  need_count(s, "version", "sharded", source, 1, 1);
  out.world_size = static_cast<int>(need_count(s, "world_size", "sharded", source, 1, kMaxWorld));
  out.strategy = need_string(s, "strategy", "sharded", source);
  out.files = parse_shard_files(s, out.world_size, source);
  std::set<std::string> named;
  out.order = parse_shard_order(s, source, named);
  const json& buffers = need(s, "buffers", "sharded", source);
  VOLT_CHECK(buffers.is_array(), "sharded checkpoint ", source, ": 'sharded.buffers' must be an array");
  std::set<std::string> keys, slot_keys;
  for (size_t i = 0; i < buffers.size(); ++i)
    out.buffers.push_back(parse_shard_buffer(buffers[i], "sharded.buffers[" + std::to_string(i) + "]", out.world_size,
                                             source, named, keys, slot_keys));
  return out;
}

json sharded_record_to_json(const ShardedLayout& layout) {
  json files = json::array();
  for (size_t r = 0; r < layout.files.size(); ++r)
    files.push_back({{"file", shard_file_name(static_cast<int>(r), layout.world_size)},
                     {"digest", nn::digest_to_json(layout.files[r])}});
  json buffers = json::array();
  for (const auto& b : layout.buffers) {
    json slots = json::array();
    for (const auto& s : b.slots) slots.push_back({{"key", s.key}, {"offset", s.offset}, {"shape", s.shape}});
    buffers.push_back({{"key", b.key}, {"numel", b.numel}, {"chunk", b.chunk},
                       {"dtype", nn::safetensors_dtype_name(b.dtype)}, {"slots", slots}});
  }
  return {{"version", 1},      {"world_size", layout.world_size}, {"strategy", layout.strategy},
          {"files", files},    {"order", layout.order},            {"buffers", buffers}};
}

nn::FileDigest write_rank_shards(const std::string& stem, int rank, int world, const std::vector<FlatShard>& buffers) {
  const fs::path dir = shards_dir(stem);
  std::error_code ec;
  fs::create_directories(dir, ec);  // every rank: whoever comes first creates it
  VOLT_CHECK(fs::is_directory(dir), "sharded checkpoint: cannot create the folder ", dir.string(),
             ec ? ": " + ec.message() : "");
  nn::StateDict sd;
  for (const auto& b : buffers) {
    VOLT_CHECK(b.shard.defined() && b.shard.dim() == 1 && b.shard.size(0) == b.chunk && b.shard.dtype() == b.dtype,
               "sharded checkpoint: buffer '", b.key, "' must be a (", b.chunk, ",) ", dtype_name(b.dtype),
               " tensor on every rank");
    sd.emplace_back(b.key, b.shard);
  }
  return nn::save_safetensors((dir / shard_file_name(rank, world)).string(), sd,
                              {{"format", "volt-checkpoint-shard"},
                               {"rank", std::to_string(rank)},
                               {"world_size", std::to_string(world)}});
}

void remove_stale_shard_files(const std::string& stem, int world) {
  std::error_code ec;
  for (fs::directory_iterator it(shards_dir(stem), ec), end; !ec && it != end; it.increment(ec)) {
    int r = 0, w = 0;
    if (parse_shard_file_name(it->path().filename().string(), r, w) && (w != world || r >= w)) {
      std::error_code e2;
      fs::remove(it->path(), e2);
    }
  }
}

void check_shard_files(const std::string& stem, const ShardedLayout& layout, int verify_rank) {
  const fs::path dir = shards_dir(stem);
  VOLT_CHECK(fs::is_directory(dir), "sharded checkpoint ", stem, ".json: the shard folder ", dir.string(),
             " is missing (a checkpoint written by ", layout.world_size, " ranks needs ",
             shard_file_name(0, layout.world_size), " ... ", shard_file_name(layout.world_size - 1, layout.world_size),
             " there)");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    int r = 0, w = 0;
    const std::string f = it->path().filename().string();
    if (!parse_shard_file_name(f, r, w)) continue;
    VOLT_CHECK(w == layout.world_size && r < w, "sharded checkpoint ", stem, ".json: ", it->path().string(),
               " belongs to a checkpoint of ", w, " ranks, but the record says this one was written by ",
               layout.world_size, " (shard files of two checkpoints are mixed in ", dir.string(), ")");
  }
  for (int r = 0; r < layout.world_size; ++r) {
    const std::string f = (dir / shard_file_name(r, layout.world_size)).string();
    VOLT_CHECK(fs::exists(f), "sharded checkpoint ", stem, ".json: the shard file ", f, " of rank ", r, " is missing");
    if (verify_rank < 0 || verify_rank == r) nn::verify_file_digest(f, layout.files[static_cast<size_t>(r)]);
  }
}

nn::StateDict consolidate_tensors(const std::string& stem, const ShardedLayout& layout) {
  check_shard_files(stem, layout);
  std::map<std::string, Tensor> found;
  const std::string main = stem + ".safetensors";
  for (auto& [k, t] : nn::load_safetensors(main)) found.emplace(k, t);
  std::vector<Tensor> flats;
  for (const auto& b : layout.buffers) flats.push_back(empty({b.chunk * layout.world_size}, b.dtype));
  NoGradGuard ng;
  for (int r = 0; r < layout.world_size; ++r) {
    auto mine = load_rank_shards(stem, layout, r);
    for (size_t i = 0; i < layout.buffers.size(); ++i) {
      const auto& b = layout.buffers[i];
      flats[i].narrow(0, static_cast<int64_t>(r) * b.chunk, b.chunk).copy_(mine.at(b.key));
    }
  }
  for (size_t i = 0; i < layout.buffers.size(); ++i)
    for (const auto& s : layout.buffers[i].slots) {
      VOLT_CHECK(!found.count(s.key), "sharded checkpoint ", stem, ": '", s.key, "' is both in ", main,
                 " and in buffer '", layout.buffers[i].key, "'");
      found.emplace(s.key, flats[i].narrow(0, s.offset, shape_numel(s.shape)).reshape(s.shape).contiguous());
    }
  nn::StateDict out;
  for (const auto& k : layout.order) {
    auto it = found.find(k);
    VOLT_CHECK(it != found.end(), "sharded checkpoint ", stem, ".json: '", k, "' is in the layout's order but neither ",
               main, " nor any buffer holds it");
    out.emplace_back(k, it->second);
    found.erase(it);
  }
  VOLT_CHECK(found.empty(), "sharded checkpoint ", stem, ": ", main, " holds '", found.begin()->first,
             "', which the record's order does not name");
  return out;
}

void consolidate_checkpoint(const std::string& in_stem, const std::string& out_stem) {
  VOLT_CHECK(fs::weakly_canonical(in_stem) != fs::weakly_canonical(out_stem), "consolidate_checkpoint: the output \"",
             out_stem, "\" is the input; write the full checkpoint under another name");
  const std::string js = in_stem + ".json", st = in_stem + ".safetensors";
  VOLT_CHECK(fs::exists(js) && fs::exists(st), "consolidate_checkpoint: \"", in_stem,
             "\" is not a complete checkpoint (", fs::exists(js) ? st : js, " is missing)");
  json record = nn::load_json(js);
  VOLT_CHECK(record.is_object() && record.value("format", "") == "volt-checkpoint", "consolidate_checkpoint: ", js,
             " is not a Volt checkpoint record");
  verify_checkpoint_weights(in_stem, record);
  nn::StateDict full;
  if (is_sharded_record(record)) {
    full = consolidate_tensors(in_stem, parse_sharded_record(record, js));
    record.erase("sharded");
  } else {
    full = nn::load_safetensors(st);
  }
  const fs::path out(out_stem);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  // As Trainer::save_checkpoint: an old record goes first, the new one last.
  fs::remove(out_stem + ".json");
  record["safetensors_digest"] = nn::digest_to_json(
      nn::save_safetensors(out_stem + ".safetensors", full, {{"format", "volt-checkpoint"}}));
  nn::save_json_atomic(out_stem + ".json", record);
}

void remove_shards_dir(const std::string& stem) {
  std::error_code ec;
  fs::remove_all(shards_dir(stem), ec);
}

}  // namespace volt
