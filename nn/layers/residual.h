#pragma once
#include <memory>

#include <volt/nn/module.h>

namespace volt::nn {

/// x + fn(x): a residual (skip) connection around any one-tensor module, so a Sequential can hold pre-norm
/// transformer blocks (attention, then a feed-forward block), e.g. with x (N, L, d):
/// @code
///   auto mlp = std::make_shared<Sequential>();
///   mlp->push_back(std::make_shared<LayerNorm>(d));
///   mlp->push_back(std::make_shared<Linear>(d, 4 * d));
///   mlp->push_back(std::make_shared<GELU>());
///   mlp->push_back(std::make_shared<Linear>(4 * d, d));
///   Sequential block{std::make_shared<Residual>(std::make_shared<MultiheadAttention>(d, h, 0.0, true, true)),
///                    std::make_shared<Residual>(mlp)};
/// @endcode
/// fn is owned and registered as the child "fn" (its parameters are "fn.weight", ...); fn(x) must have x's shape.
class Residual : public UnaryModule {
 public:
  explicit Residual(std::shared_ptr<UnaryModule> fn);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Residual"; }

  std::shared_ptr<UnaryModule> fn;
};

}  // namespace volt::nn
