#pragma once
/// @file
/// Seeded permutations for shuffling. The permutation is a pure function of (n, seed, stream): Fisher-Yates
/// driven by Philox 4x32-10 keyed by `seed` with `stream` in the high counter word, so samplers can derive
/// one independent permutation per epoch (stream = epoch) and every rank of a distributed job computes the
/// same one without communicating.
#include <cstdint>
#include <vector>

namespace volt::data {

std::vector<int64_t> randperm(int64_t n, uint64_t seed, uint64_t stream = 0);

}  // namespace volt::data
