#pragma once
// Where a random kernel's Philox key and first counter come from (kernels/backend/dropout.h, factory.h). Eager:
// the values themselves, reserved from the generator when the op ran. Under graph capture (kernels/graph.h) the
// op is recorded once and replayed many times, so the generator's state at each replay is read from device
// memory instead: base = {seed, offset} filled before every replay, and `offset` is the draw's counter within
// the captured work. Either way the numbers equal those of the same code run eagerly.
#include <cstdint>

#include <volt/kernels/common/macros.h>

namespace volt {

struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* base = nullptr;  ///< captured draw: {seed, offset} of the generator, read at run time
  VOLT_HD uint64_t key() const { return base != nullptr ? base[0] : seed; }
  VOLT_HD uint64_t first() const { return base != nullptr ? base[1] + offset : offset; }
};

}  // namespace volt
