#pragma once
// The message of the exception a callable throws ("no exception" when it returns), for tests that check several
// parts of one error text.
#include <exception>
#include <functional>
#include <string>

namespace volt::testing {

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace volt::testing
