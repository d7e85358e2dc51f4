#pragma once
#include <initializer_list>
#include <memory>
#include <vector>

#include <volt/nn/module.h>

namespace volt::nn {

/// Applies its children in order. Children are owned and named "0", "1", ... in push order.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> layers);

  template <class M>
    requires std::is_base_of_v<UnaryModule, M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> layer) {
    VOLT_CHECK(layer != nullptr, "Sequential::push_back: the layer is null");
    register_module(std::to_string(layers_.size()), std::static_pointer_cast<Module>(layer));
    layers_.push_back(layer);
    return layer;
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  UnaryModule& operator[](size_t i) const;
  std::string type_name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

}  // namespace volt::nn
