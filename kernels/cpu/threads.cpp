#include <volt/kernels/threads.h>

#include <cstdlib>

#include <volt/runtime/error.h>

#if VOLT_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace volt {

namespace {
int g_threads = 1;

struct ApplyEnvThreads {
  ApplyEnvThreads() {
#if VOLT_HAVE_OPENBLAS
    g_threads = openblas_get_num_threads();
#endif
    if (const char* v = std::getenv("VOLT_NUM_THREADS")) {
      int n = std::atoi(v);
      if (n >= 1) set_num_threads(n);
    }
  }
} apply_env_threads;
}  // namespace

void set_num_threads(int n) {
  VOLT_CHECK(n >= 1, "set_num_threads: expected a thread count >= 1, got ", n);
#if VOLT_HAVE_OPENBLAS
  openblas_set_num_threads(n);
#endif
  g_threads = n;
}

int get_num_threads() { return g_threads; }

}  // namespace volt
