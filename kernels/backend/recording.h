#pragma once
// The CPU side of graph capture (kernels/graph.h): while a Graph captures CPU work on a thread, the registry
// (table(), registry.cpp) hands that thread's CPU kernel calls to a backend whose every kernel records the call
// and its arguments (copied) instead of running it. Internal.
#include <volt/kernels/backend/registry.h>

namespace volt::backend::detail {
// The recording CPU backend when this thread is capturing CPU work, else nullptr (kernels/graph.cpp).
const Backend* cpu_recording_backend();
// The CPU backend itself, whatever table() returns now (registry.cpp): what the recorded calls run.
const Backend& cpu_backend();
}  // namespace volt::backend::detail
