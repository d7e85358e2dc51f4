#include <volt/trainer/strategies/strategy.h>

#include <volt/kernels/ops.h>
#include <volt/nn/clip_grad.h>
#include <volt/nn/optim.h>

namespace volt {

void Strategy::setup(nn::Module& module) { module.to(root_device()); }

void Strategy::backward(const Tensor& loss, bool sync_grad) { loss.backward(); }

Tensor Strategy::clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return nn::clip_grad_norm_no_sync_(params, max_norm);
}

nn::StateDict Strategy::module_state_dict(nn::Module& module) { return module.state_dict(); }

void Strategy::load_module_state_dict(nn::Module& module, const nn::StateDict& sd) {
  module.load_state_dict(sd, /*strict=*/true);
}

Strategy::OptimizerState Strategy::optimizer_state(const optim::Optimizer& optimizer) {
  return {optimizer.state_dict(), optimizer.hyper_state()};
}

void Strategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& sd) {
  optimizer.load_state_dict(sd);
}

void Strategy::load_optimizer_hyper_state(optim::Optimizer& optimizer, const std::map<std::string, double>& hs) {
  optimizer.load_hyper_state(hs);
}

}  // namespace volt
