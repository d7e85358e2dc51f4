#include <volt/runtime/generator.h>

namespace volt {

namespace {
thread_local Generator* t_generator = nullptr;  // a ThreadGeneratorScope's generator on this thread
}

Generator& default_generator() {
  static Generator gen;
  return t_generator ? *t_generator : gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

ThreadGeneratorScope::ThreadGeneratorScope(Generator* gen) : prev_(t_generator) { t_generator = gen; }
ThreadGeneratorScope::~ThreadGeneratorScope() { t_generator = prev_; }

}  // namespace volt
