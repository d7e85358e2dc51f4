#include <volt/nn/state_dict_check.h>

#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <volt/runtime/error.h>

namespace volt::nn {

void check_state_dict_matches(const std::string& type_name, const StateDict& own, const StateDict& given,
                              bool strict) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : given) by_name.emplace(n, &t);
  std::unordered_set<std::string> own_names;
  std::vector<std::string> missing, unexpected, misshaped, mistyped;
  for (const auto& [n, t] : own) {
    own_names.insert(n);
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined() || src.shape() != t.shape())
      misshaped.push_back(n + " (expected " + t.shape_str() + ", got " +
                          (src.defined() ? src.shape_str() : "undefined") + ")");
    // A stored dtype different from the parameter's is a wrong or corrupt file, not something to convert.
    else if (src.dtype() != t.dtype())
      mistyped.push_back(n + " (expected " + dtype_name(t.dtype()) + ", got " + dtype_name(src.dtype()) + ")");
  }
  for (const auto& [n, t] : given)
    if (!own_names.count(n)) unexpected.push_back(n);
  const bool fail = !misshaped.empty() || !mistyped.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (!fail) return;
  std::ostringstream os;
  os << type_name << "::load_state_dict: error(s) in loading the state dict:";
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    os << "\n  " << what << ": ";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  };
  list("size mismatch", misshaped);
  list("dtype mismatch", mistyped);
  if (strict) {
    list("missing keys", missing);
    list("unexpected keys", unexpected);
  }
  VOLT_FAIL(os.str());
}

}  // namespace volt::nn
