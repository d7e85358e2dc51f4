#pragma once
/// @file
/// The activation a fused linear layer applies after its bias (kernels/ops.h: linear(x, weight, bias, act);
/// nn::Linear's LinearOptions::activation).
#include <cstdint>

namespace volt {

/// None: x W^T + b. ReLU: max(z, 0). GELU: z Phi(z), the exact (erf) form of gelu(). GELUTanh: gelu's tanh
/// approximation (GeluApproximate::Tanh).
enum class Activation : uint8_t { None, ReLU, GELU, GELUTanh };

/// "none", "relu", "gelu", "gelu_tanh".
constexpr const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
  }
  return "unknown";
}

}  // namespace volt
