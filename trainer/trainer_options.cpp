#include <volt/trainer/trainer_options.h>

#include <cmath>
#include <sstream>
#include <vector>

#include <volt/runtime/error.h>

namespace volt {

int64_t BatchAmount::resolve(int64_t total, const char* what) const {
  if (is_fraction) {
    VOLT_CHECK(fraction >= 0.0 && fraction <= 1.0, "Trainer: ", what, "=", fraction,
               " is not a valid fraction; expected a float in [0, 1] or an integer batch count");
    if (fraction == 1.0) return total;
    return static_cast<int64_t>(std::floor(static_cast<double>(total) * fraction));
  }
  VOLT_CHECK(count >= 0, "Trainer: ", what, "=", count, " is negative; expected a batch count >= 0");
  return std::min(count, total);
}

double parse_max_time(const std::string& s) {
  if (s.empty()) return -1;
  if (s.find(':') == std::string::npos) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (...) {
      used = 0;
    }
    VOLT_CHECK(used == s.size() && v >= 0, "Trainer: max_time=\"", s,
               "\" is not valid; expected \"DD:HH:MM:SS\" or a number of seconds");
    return v;
  }
  std::vector<int64_t> parts;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ':')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    VOLT_CHECK(used == item.size() && !item.empty() && v >= 0, "Trainer: max_time=\"", s,
               "\" is not valid; expected \"DD:HH:MM:SS\" with non-negative integers");
    parts.push_back(v);
  }
  VOLT_CHECK(parts.size() == 4, "Trainer: max_time=\"", s, "\" has ", parts.size(),
             " fields; expected \"DD:HH:MM:SS\"");
  return ((parts[0] * 24 + parts[1]) * 60 + parts[2]) * 60.0 + parts[3];
}

}  // namespace volt
