// FSDPStrategy's module loading (fsdp.h): each rank copies only its slices of the sharded parameters into its
// shards, so a load never allocates a unit's full parameters (the bound benchmarks/bench_sharded_load.cpp checks).
#include <algorithm>
#include <map>
#include <unordered_map>

#include <volt/nn/state_dict_check.h>
#include <volt/runtime/error.h>
#include <volt/trainer/strategies/fsdp.h>

namespace volt {

void FSDPStrategy::load_module_sliced(nn::Module& module, const nn::StateDict& sd, const SliceFill& fill) {
  const nn::StateDict own = module.state_dict();
  nn::check_state_dict_matches(module.type_name(), own, sd, /*strict=*/true);
  // A sharded parameter views its bucket's flat storage from its slot's offset (build_units); tied names of one
  // parameter view the same elements and load the same slice.
  std::map<const Storage*, size_t> bucket_of_storage;
  for (size_t b = 0; b < bucket_state_.size(); ++b) bucket_of_storage[bucket_state_[b].storage.get()] = b;
  const dist::ShardedReducer* r = sharded_reducer();  // non-null while there are buckets
  NoGradGuard ng;
  for (const auto& [name, t] : own) {
    auto it = bucket_of_storage.find(t.storage().get());
    if (it == bucket_of_storage.end()) {  // a buffer or a frozen parameter: whole on every rank
      Tensor dst = t;
      fill(name, 0, -1, dst);
      continue;
    }
    const auto& bucket = r->buckets()[it->second];
    const int64_t own_lo = static_cast<int64_t>(r->rank()) * bucket.chunk;
    const int64_t lo = std::max(t.offset(), own_lo), hi = std::min(t.offset() + t.numel(), own_lo + bucket.chunk);
    if (lo >= hi) continue;  // another rank's
    Tensor dst = bucket.shard.detach().narrow(0, lo - own_lo, hi - lo);
    fill(name, lo - t.offset(), hi - lo, dst);
  }
  // A unit gathered now (none during a resume: fit restores between steps) holds the old values.
  for (size_t b = 0; b < bucket_state_.size(); ++b) {
    BucketState& st = bucket_state_[b];
    if (!st.storage->data) continue;
    if (st.work) st.work->wait();
    st.work = group().all_gather_into_async(r->buckets()[b].shard.detach(), st.full);
    ++gathers_;
    st.work->wait();
    st.work.reset();
  }
}

void FSDPStrategy::load_module_state_dict(nn::Module& module, const nn::StateDict& sd) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [n, t] : sd) given.emplace(n, &t);
  load_module_sliced(module, sd, [&](const std::string& name, int64_t first, int64_t count, Tensor& dst) {
    const Tensor& src = *given.at(name);
    if (count < 0) dst.copy_(src);
    else dst.copy_(src.reshape({src.numel()}).narrow(0, first, count));
  });
}

void FSDPStrategy::load_module_from_file(nn::Module& module, const nn::StateDict& placeholders,
                                         nn::SafetensorsReader& reader) {
  std::unordered_map<std::string, const nn::SafetensorsReader::Entry*> entries;
  for (const auto& e : reader.entries()) entries.emplace(e.name, &e);
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [n, t] : placeholders) given.emplace(n, &t);
  load_module_sliced(module, placeholders, [&](const std::string& name, int64_t first, int64_t count, Tensor& dst) {
    auto it = entries.find(name);
    VOLT_CHECK(it != entries.end(), "FSDPStrategy::load_module_from_file: ", reader.path(), " has no tensor '", name,
               "'");
    const nn::SafetensorsReader::Entry& e = *it->second;
    const Tensor& expect = *given.at(name);
    VOLT_CHECK(e.shape == expect.shape() && e.dtype == expect.dtype(), "FSDPStrategy::load_module_from_file: ",
               reader.path(), ": '", name, "' is ", dtype_name(e.dtype), " ", shape_to_string(e.shape),
               " but the state to load says ", dtype_name(expect.dtype()), " ", expect.shape_str());
    if (count < 0) reader.read_into(e, dst);
    else reader.read_range_into(e, first, count, dst);
  });
}

}  // namespace volt
