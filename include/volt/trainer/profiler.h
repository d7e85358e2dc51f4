#pragma once
/// @file
/// Deprecated path, kept until Volt 0.3: trainer/ became a package and this header moved to
/// <volt/trainer/profilers/profiler.h>. Include the new path.
#include <volt/trainer/profilers/profiler.h>
