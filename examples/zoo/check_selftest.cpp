// The zoo's checks can fail: zoo::check_gradients rejects a gradient that is off by a factor of two (a loss whose
// autograd graph misses half of its dependence on the parameter), zoo::check_close rejects values outside its
// tolerance, and zoo::check_loss_fell rejects a loss that did not fall. Exit status 0 when every check passes
// what it should and rejects what it should.
#include <volt/nn/nn.h>
#include "examples/zoo/zoo_check.h"

using namespace volt;

int main() {
  return zoo::run("zoo_check_selftest", [] {
    nn::Linear layer(3, 2);
    layer.to(DType::f64);
    const Tensor x = randn({4, 3}, DType::f64);
    auto right = [&] { return sum(square(layer(x))); };
    // Half of the square's dependence on the weights is hidden from autograd: the gradient is half the truth.
    auto wrong = [&] {
      Tensor y = layer(x);
      return sum(y * y.detach());
    };
    const bool accepts_right = zoo::check_gradients("selftest (right gradient)", layer, {"weight", "bias"}, right);
    const bool rejects_wrong =
        !zoo::check_gradients("selftest (half gradient, must fail)", layer, {"weight", "bias"}, wrong);
    const bool close_ok = zoo::check_close("selftest (close)", {1.0, 2.0}, {1.0 + 1e-9, 2.0}, 1e-6, 0);
    const bool close_rejects = !zoo::check_close("selftest (not close, must fail)", {1.0}, {1.01}, 1e-3, 0);
    zoo::LossCurve flat, falling;
    for (int i = 0; i < 40; ++i) {
      flat.record(full({}, 1.0));
      falling.record(full({}, 1.0 / (1 + i)));
    }
    const bool fell_ok = zoo::check_loss_fell("selftest (falling)", falling, 10, 0.5);
    const bool flat_rejected = !zoo::check_loss_fell("selftest (flat, must fail)", flat, 10, 0.9);
    const bool short_rejected = !zoo::check_loss_fell("selftest (too few losses, must fail)", falling, 30, 0.9);
    return accepts_right && rejects_wrong && close_ok && close_rejects && fell_ok && flat_rejected && short_rejected;
  });
}
