#include <volt/data/collate.h>

#include <cstring>

#include <volt/data/dataset.h>
#include <volt/data/pinned_pool.h>

namespace volt::data {

namespace {

std::string names(const std::map<std::string, Tensor>& fields) {
  std::string s;
  for (const auto& [k, v] : fields) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s.empty() ? std::string("none") : s;
}

// Stacks tensor `pick(sample)` of every sample; all defined or all undefined.
template <class Pick>
Tensor stack_member(const std::vector<Batch>& samples, bool pinned, const std::string& what, Pick pick) {
  const bool defined = pick(samples[0]).defined();
  std::vector<Tensor> ts;
  ts.reserve(samples.size());
  for (size_t k = 0; k < samples.size(); ++k) {
    const Tensor& t = pick(samples[k]);
    VOLT_CHECK(t.defined() == defined, "default_collate: sample ", k, defined ? " has no " : " has a ", what,
               " but sample 0 ", defined ? "has one" : "does not", "; every sample must agree");
    if (defined) ts.push_back(t);
  }
  if (!defined) return Tensor();
  const std::string op = "default_collate (" + what + ")";
  return stack_samples(ts, pinned, op.c_str());
}

Tensor pinned_tensor(const Tensor& t) {
  if (!t.defined() || t.is_cuda()) return t;
  Tensor out = empty_pinned_batch(t.shape(), t.dtype());
  Tensor src = t.contiguous();
  if (src.nbytes()) std::memcpy(out.data_ptr(), src.data_ptr(), src.nbytes());
  return out;
}

}  // namespace

Batch pinned_copy(const Batch& batch) {
  Batch out;
  out.input = pinned_tensor(batch.input);
  out.target = pinned_tensor(batch.target);
  for (const auto& [name, t] : batch.fields) out.fields.emplace(name, pinned_tensor(t));
  return out;
}

Batch default_collate(const std::vector<Batch>& samples, bool pinned) {
  VOLT_CHECK(!samples.empty(), "default_collate: no samples");
  const auto& keys = samples[0].fields;
  for (size_t k = 1; k < samples.size(); ++k) {
    bool same = samples[k].fields.size() == keys.size();
    for (auto a = keys.begin(), b = samples[k].fields.begin(); same && a != keys.end(); ++a, ++b)
      same = a->first == b->first;
    VOLT_CHECK(same, "default_collate: sample ", k, " has fields ", names(samples[k].fields), " but sample 0 has ",
               names(keys), "; every sample must have the same field names");
  }
  Batch b;
  b.input = stack_member(samples, pinned, "input", [](const Batch& s) -> const Tensor& { return s.input; });
  b.target = stack_member(samples, pinned, "target", [](const Batch& s) -> const Tensor& { return s.target; });
  for (const auto& [name, unused] : keys)
    b.fields.emplace(name, stack_member(samples, pinned, "field \"" + name + "\"",
                                        [&n = name](const Batch& s) -> const Tensor& { return s.fields.at(n); }));
  return b;
}

}  // namespace volt::data
