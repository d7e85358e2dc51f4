#pragma once
/// @file
/// The model summary printed at the start of fit: one row per direct child (index, name, type, parameter
/// count, train/eval mode), then trainable / non-trainable / total counts and the parameters' size in MB.
///
/// @code{.unparsed}
///   | Name | Type   | Params | Mode
///   ------------------------------------
/// @endcode
/// 0 | l1   | Linear | 100 K  | train
/// 1 | l2   | Linear | 1.3 K  | train
///   ------------------------------------
///   101 K     Trainable params
///   0         Non-trainable params
///   101 K     Total params
///   0.407     Total estimated model params size (MB)
///   32-true   Precision
/// (the last line when a precision is given: the Trainer passes its own).
#include <cstdint>
#include <string>

#include <volt/nn/module.h>

namespace volt {

/// 1234 -> "1.2 K", 101770 -> "101 K", 2.5e6 -> "2.5 M" (three significant digits at most).
std::string human_count(int64_t n);
std::string model_summary(const nn::Module& module, const std::string& precision = "");

}  // namespace volt
