#pragma once
/// @file
/// Two error tiers: VOLT_CHECK for user mistakes (throws volt::Error with a formatted message that names the
/// argument, the value and what was expected) and VOLT_ASSERT for internal invariants (a bug in Volt).
#include <sstream>
#include <stdexcept>
#include <string>

namespace volt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
[[noreturn]] void assert_fail(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace volt

#define VOLT_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) ::volt::detail::throw_error(__FILE__, __LINE__,                     \
                                             ::volt::detail::concat(__VA_ARGS__));   \
  } while (0)

#define VOLT_FAIL(...) ::volt::detail::throw_error(__FILE__, __LINE__, ::volt::detail::concat(__VA_ARGS__))

#define VOLT_ASSERT(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond)) ::volt::detail::assert_fail(__FILE__, __LINE__, #cond,                         \
                                             ::volt::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
