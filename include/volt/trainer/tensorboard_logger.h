#pragma once
/// @file
/// Deprecated path, kept until Volt 0.3: trainer/ became a package and this header moved to
/// <volt/trainer/loggers/tensorboard_logger.h>. Include the new path.
#include <volt/trainer/loggers/tensorboard_logger.h>
