#pragma once
// Parameter-parity helpers shared by the strategy tests (ZeRO, FSDP, dp/ddp2): every parameter's values in
// registration order, and the largest absolute difference between two such lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <volt/nn/module.h>

namespace volt::test {

inline std::vector<std::vector<double>> parameter_values(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p.detach().contiguous().to_vector<double>());
  return out;
}

/// Also fails the test when the lists (or one parameter's values) differ in length.
inline double max_abs_diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double d = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    for (size_t j = 0; j < a[i].size() && j < b[i].size(); ++j) d = std::max(d, std::abs(a[i][j] - b[i][j]));
  }
  return d;
}

}  // namespace volt::test
