#pragma once
/// @file
/// Deprecated path, kept until Volt 0.3: trainer/ became a package and this header moved to
/// <volt/trainer/callbacks/early_stopping.h>. Include the new path.
#include <volt/trainer/callbacks/early_stopping.h>
