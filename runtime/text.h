#pragma once
// Small text helpers shared by the layers' sources (internal: not installed).
#include <string_view>

namespace volt::detail {

// `s` without leading and trailing spaces and tabs.
inline std::string_view trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

}  // namespace volt::detail
