#include <volt/runtime/error.h>

namespace volt::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  (void)file;
  (void)line;
  throw Error(msg);
}

void assert_fail(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(concat("internal error (a bug in Volt) at ", file, ":", line, ": ", cond,
                     msg.empty() ? "" : ": ", msg));
}

}  // namespace volt::detail
