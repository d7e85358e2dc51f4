#include <volt/nn/layers/activation.h>

namespace volt::nn {

std::string GELU::extra_repr() const { return approximate == GeluApproximate::Tanh ? "approximate='tanh'" : ""; }

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

}  // namespace volt::nn
