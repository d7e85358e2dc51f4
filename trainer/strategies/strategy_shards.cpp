// Strategy's defaults for sharded checkpoints and toggle_optimizer: a strategy without shards holds whole tensors.
#include <volt/nn/optim.h>
#include <volt/trainer/strategies/strategy.h>

namespace volt {

Strategy::ShardedOptimizerState Strategy::sharded_optimizer_state(const optim::Optimizer& optimizer) {
  VOLT_FAIL(name(), ": sharded_optimizer_state(", optimizer.type_name(), "): this strategy holds no shards; its "
            "checkpoints use the full layout (optimizer_state)");
}

void Strategy::load_sharded_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict&,
                                            const std::vector<FlatShard>&) {
  VOLT_FAIL(name(), ": load_sharded_optimizer_state(", optimizer.type_name(), "): this strategy holds no shards; "
            "a sharded checkpoint is consolidated and loaded through load_optimizer_state");
}

std::vector<Tensor> Strategy::optimizer_parameters(const optim::Optimizer& optimizer) {
  std::vector<Tensor> out;
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params) out.push_back(p);
  return out;
}

}  // namespace volt
