// Op table rows (see op_table.h): three steps of RMSprop, Adagrad and Lion (nn/optimizers.h; the fused kernels
// in kernels/cpu/optim.cpp and kernels/cuda/optim.cu, math in kernels/common/optim_math_extra.h), comparing the
// parameters and the optimizer state, as op_table_rows_random_optim.cpp does for SGD and Adam.
#include "kernels/op_table/op_table.h"
#include <volt/nn/optimizers.h>

namespace volt::optable {
namespace {

// Three steps of `opt` over a copy of param x[0] with gradients x[1], x[2], x[3]; the parameter followed by every
// state tensor (flattened, in the parameter's dtype).
template <class Opt, class Options>
Tensor optim_steps(const Inputs& x, const Options& options) {
  Tensor p = x[0].detach().clone().set_requires_grad();
  Opt opt(std::vector<Tensor>{p}, options);
  for (int s = 1; s <= 3; ++s) {
    p.set_grad(x[static_cast<size_t>(s)].detach().clone());
    opt.step();
  }
  std::vector<Tensor> parts{p.detach().flatten()};
  for (const auto& [name, t] : opt.state_dict())
    if (t.numel() == p.numel()) parts.push_back(cast(t, p.dtype()).flatten());
  return cat(parts);
}

std::vector<In> optim_inputs() { return {U({3, 5}), U({3, 5}), U({3, 5}), U({3, 5})}; }

const bool kRows = add_rows([](std::vector<OpRow>& r) {
  // Half parameters are rounded after every step (their state stays f32): wider tolerances.
  r.push_back(row("rmsprop", FWD((optim_steps<optim::RMSprop>(x, optim::RMSpropOptions{.lr = 0.01}))), optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("rmsprop_momentum_centered_wd", FWD((optim_steps<optim::RMSprop>(
                      x, optim::RMSpropOptions{.lr = 0.01, .alpha = 0.9, .eps = 1e-6, .weight_decay = 0.05,
                                               .momentum = 0.8, .centered = true}))),
                  optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("adagrad", FWD((optim_steps<optim::Adagrad>(x, optim::AdagradOptions{.lr = 0.05}))), optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("adagrad_decay_wd_init", FWD((optim_steps<optim::Adagrad>(
                      x, optim::AdagradOptions{.lr = 0.05, .lr_decay = 0.2, .weight_decay = 0.1,
                                               .initial_accumulator_value = 0.3}))),
                  optim_inputs())
                  .no_grad().tol(3));
  r.push_back(row("lion_wd", FWD((optim_steps<optim::Lion>(
                      x, optim::LionOptions{.lr = 0.01, .betas = {0.8, 0.95}, .weight_decay = 0.1}))),
                  optim_inputs())
                  .no_grad().tol(3));
});

}  // namespace
}  // namespace volt::optable
