#pragma once
/// @file
/// Deprecated path, kept until Volt 0.3: trainer/ became a package and this header moved to
/// <volt/trainer/precision/precision.h>. Include the new path.
#include <volt/trainer/precision/precision.h>
