#include <volt/trainer/collectives.h>

namespace volt {

std::optional<double> Collectives::agreed_value(std::optional<double> local) {
  const int world = world_size();
  std::vector<double> owner{local ? static_cast<double>(global_rank()) : static_cast<double>(world)};
  reduce_values(owner, dist::ReduceOp::Min);
  const int root = static_cast<int>(owner[0]);
  if (root >= world) return std::nullopt;
  return broadcast_value(local.value_or(0.0), root);
}

}  // namespace volt
