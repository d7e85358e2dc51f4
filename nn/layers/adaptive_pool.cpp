#include <volt/nn/layers/adaptive_pool.h>

namespace volt::nn {

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::pair<int64_t, int64_t> size) : output_size(size) {
  VOLT_CHECK(size.first > 0 && size.second > 0, "AdaptiveAvgPool2d: output_size (", size.first, ", ", size.second,
             ") must be positive");
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  if (output_size.first == output_size.second) return "output_size=" + std::to_string(output_size.first);
  return "output_size=(" + std::to_string(output_size.first) + ", " + std::to_string(output_size.second) + ")";
}

}  // namespace volt::nn
