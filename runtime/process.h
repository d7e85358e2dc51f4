#pragma once
// Whether another process on this machine still runs: used to name the ranks of a job that died
// (distributed/) and to tell a killed writer's leftover temporary files from a live writer's (trainer/).
#include <cstdint>

namespace volt {

// False when no process `pid` exists or it is a zombie (exited, not yet reaped by its parent or launcher);
// true when it runs, and also when that cannot be told (pid <= 0, or not ours to signal), so callers err on
// the side of "still there".
bool process_running(int64_t pid);

}  // namespace volt
