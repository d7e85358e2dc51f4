#include <volt/nn/layers/residual.h>

namespace volt::nn {

Residual::Residual(std::shared_ptr<UnaryModule> f) : fn(std::move(f)) {
  VOLT_CHECK(fn != nullptr, "Residual: the wrapped module is null");
  register_module("fn", fn);
}

Tensor Residual::forward(const Tensor& x) {
  Tensor y = (*fn)(x);
  // A broadcasting add would hide a wrong shape; refuse it.
  VOLT_CHECK(y.shape() == x.shape(), "Residual: the wrapped module (", fn->type_name(), ") maps an input of shape ",
             x.shape_str(), " to ", y.shape_str(), "; x + fn(x) needs fn(x) to have the input's shape");
  return add(x, y);
}

}  // namespace volt::nn
