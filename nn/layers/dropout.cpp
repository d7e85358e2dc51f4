// Separate from activation.cpp so that users of the activations do not pull in the dropout op.
#include <volt/nn/layers/activation.h>

namespace volt::nn {

Dropout::Dropout(double p_) : p(p_) {
  VOLT_CHECK(p_ >= 0.0 && p_ < 1.0, "Dropout: p must be in [0, 1), got ", p_);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return "p=" + std::to_string(p); }

}  // namespace volt::nn
