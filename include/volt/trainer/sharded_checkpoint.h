#pragma once
/// @file
/// Deprecated path, kept until Volt 0.3: trainer/ became a package and this header moved to
/// <volt/trainer/checkpoint/sharded.h>. Include the new path.
#include <volt/trainer/checkpoint/sharded.h>
