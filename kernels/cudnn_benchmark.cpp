#include <volt/kernels/cudnn_benchmark.h>

#include <atomic>

namespace volt {

namespace {
std::atomic<bool> g_cudnn_benchmark{false};
}

void set_cudnn_benchmark(bool on) { g_cudnn_benchmark.store(on, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_cudnn_benchmark.load(std::memory_order_relaxed); }

}  // namespace volt
