#include <volt/runtime/process.h>

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace volt {

bool process_running(int64_t pid) {
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno != ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');  // the command name may hold spaces; the state follows its ')'
  return !(close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z');
}

}  // namespace volt
