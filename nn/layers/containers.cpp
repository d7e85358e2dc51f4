#include <volt/nn/layers/containers.h>

namespace volt::nn {

namespace detail {
void wrong_module_type(const std::string& where, const Module& m, const char* wanted) {
  VOLT_FAIL(where, " is a ", m.type_name(), ", not the requested type (", wanted, ")");
}
}  // namespace detail

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

Module& ModuleList::operator[](size_t i) const { return *ptr(i); }

const std::shared_ptr<Module>& ModuleList::ptr(size_t i) const {
  VOLT_CHECK(i < modules_.size(), "ModuleList: index ", i, " out of range for ", modules_.size(), " modules");
  return modules_[i];
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [k, m] : modules) insert(k, m);
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& kv : modules_)
    if (kv.first == key) return true;
  return false;
}

Module& ModuleDict::operator[](const std::string& key) const { return *ptr(key); }

const std::shared_ptr<Module>& ModuleDict::ptr(const std::string& key) const {
  for (const auto& kv : modules_)
    if (kv.first == key) return kv.second;
  std::string ks;
  for (const auto& kv : modules_) ks += (ks.empty() ? "\"" : ", \"") + kv.first + "\"";
  VOLT_FAIL("ModuleDict: no key \"", key, "\"; the keys are ", ks.empty() ? std::string("(none)") : ks);
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  out.reserve(modules_.size());
  for (const auto& kv : modules_) out.push_back(kv.first);
  return out;
}

}  // namespace volt::nn
