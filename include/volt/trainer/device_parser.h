#pragma once
/// @file
/// Deprecated path, kept until Volt 0.3: trainer/ became a package and this header moved to
/// <volt/trainer/strategies/device_parser.h>. Include the new path.
#include <volt/trainer/strategies/device_parser.h>
