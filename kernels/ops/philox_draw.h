#pragma once
// The Philox arguments of a random op's draw of `counters` counters from `gen` on `device`: reserved from the
// generator now when run eagerly, or through the capturing Graph (kernels/graph.h), which re-reads the
// generator's state at every replay.
#include <volt/kernels/common/philox_args.h>
#include <volt/kernels/graph.h>
#include <volt/runtime/generator.h>

namespace volt {

inline PhiloxArgs philox_draw(Generator& gen, Device device, uint64_t counters) {
  if (Graph* g = Graph::capturing(device)) {
    auto [offset, base] = g->philox(gen, counters);
    return PhiloxArgs{0, offset, base};
  }
  const uint64_t seed = gen.seed();  // before reserve: both under the same seed
  return PhiloxArgs{seed, gen.reserve(counters), nullptr};
}

}  // namespace volt
