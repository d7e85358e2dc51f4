#include <volt/nn/layers/sequential.h>

namespace volt::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> layers) {
  for (const auto& l : layers) push_back(l);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& l : layers_) y = l->forward(y);
  return y;
}

UnaryModule& Sequential::operator[](size_t i) const {
  VOLT_CHECK(i < layers_.size(), "Sequential::operator[]: index ", i, " out of range for ", layers_.size(), " layers");
  return *layers_[i];
}

}  // namespace volt::nn
