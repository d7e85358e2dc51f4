#include "data/batch.h"

namespace volt::data {

int64_t Batch::size() const {
  if (!input.defined()) return 0;
  return input.dim() == 0 ? 1 : input.size(0);
}

Batch Batch::to(Device device, bool non_blocking) const {
  Batch out;
  if (input.defined()) out.input = input.to(device, non_blocking);
  if (target.defined()) out.target = target.to(device, non_blocking);
  return out;
}

}  // namespace volt::data
