#include <volt/distributed/spawn.h>

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <volt/distributed/process_group.h>

extern char** environ;

namespace volt::dist {
namespace {

bool is_executable(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

std::string find_mpirun() {
  if (const char* v = std::getenv("VOLT_MPIRUN"); v && *v) {
    VOLT_CHECK(is_executable(v), "spawn_workers_if_needed: VOLT_MPIRUN='", v, "' is not an executable file");
    return v;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (const char* name : {"mpirun", "mpiexec"}) {
    std::stringstream ss(dirs);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      std::string cand = (dir.empty() ? "." : dir) + "/" + name;
      if (is_executable(cand)) return cand;
    }
  }
  VOLT_FAIL("spawn_workers_if_needed: no mpirun or mpiexec on PATH (", dirs,
            "); install Open MPI, set VOLT_MPIRUN, or launch the program with mpirun yourself");
}

std::string self_executable(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

}  // namespace

bool spawn_workers_if_needed(int argc, char** argv, int nprocs, int* exit_code) {
  if (nprocs <= 1 || detect_launch_env().source != "none") return false;
  std::string mpirun = find_mpirun();
  std::vector<std::string> args = {mpirun, "-np", std::to_string(nprocs), "--oversubscribe",
                                   self_executable(argc > 0 ? argv[0] : "")};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  if (geteuid() == 0) {
    for (const char* kv : {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}) {
      std::string key = std::string(kv).substr(0, std::strchr(kv, '=') - kv);
      if (!std::getenv(key.c_str())) env.emplace_back(kv);
    }
  }
  std::vector<char*> cargs, cenv;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, mpirun.c_str(), nullptr, nullptr, cargs.data(), cenv.data());
  VOLT_CHECK(rc == 0, "spawn_workers_if_needed: could not start '", mpirun, "': ", std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    VOLT_CHECK(errno == EINTR, "spawn_workers_if_needed: waitpid failed: ", std::strerror(errno));
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (exit_code) *exit_code = code;
  return true;
}

}  // namespace volt::dist
