#pragma once
/// @file
/// ModuleList and ModuleDict: children held in order (by index or by name) without a forward of their own, for
/// models that call their layers in a loop or pick them by key (PyTorch's nn.ModuleList / nn.ModuleDict).
/// Parameters are named "<index>.<name>" and "<key>.<name>", as in PyTorch, so state dicts map.
#include <initializer_list>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <volt/nn/module.h>

namespace volt::nn {

namespace detail {
[[noreturn]] void wrong_module_type(const std::string& where, const Module& m, const char* wanted);
}  // namespace detail

/// Children named "0", "1", ... in push order.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  template <class M>
    requires std::is_base_of_v<Module, M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    VOLT_CHECK(module != nullptr, "ModuleList::push_back: the module is null");
    register_module(std::to_string(modules_.size()), std::static_pointer_cast<Module>(module));
    modules_.push_back(module);
    return module;
  }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  /// Throws volt::Error for an index past the end.
  Module& operator[](size_t i) const;
  const std::shared_ptr<Module>& ptr(size_t i) const;
  /// The i-th module as an M (e.g. list.at<Linear>(0).weight); volt::Error naming both types when it is not one.
  template <class M>
  M& at(size_t i) const {
    Module& m = (*this)[i];
    if (auto* p = dynamic_cast<M*>(&m)) return *p;
    detail::wrong_module_type("ModuleList[" + std::to_string(i) + "]", m, typeid(M).name());
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Children under string keys, kept in insertion order. Keys follow register_module's rule (non-empty, no '.',
/// unique).
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  template <class M>
    requires std::is_base_of_v<Module, M>
  std::shared_ptr<M> insert(const std::string& key, std::shared_ptr<M> module) {
    VOLT_CHECK(module != nullptr, "ModuleDict::insert: the module for key \"", key, "\" is null");
    register_module(key, std::static_pointer_cast<Module>(module));
    modules_.emplace_back(key, module);
    return module;
  }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  bool contains(const std::string& key) const;
  /// Throws volt::Error listing the keys when `key` is absent.
  Module& operator[](const std::string& key) const;
  const std::shared_ptr<Module>& ptr(const std::string& key) const;
  template <class M>
  M& at(const std::string& key) const {
    Module& m = (*this)[key];
    if (auto* p = dynamic_cast<M*>(&m)) return *p;
    detail::wrong_module_type("ModuleDict[\"" + key + "\"]", m, typeid(M).name());
  }
  std::vector<std::string> keys() const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  std::string type_name() const override { return "ModuleDict"; }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
};

}  // namespace volt::nn
