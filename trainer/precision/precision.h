#pragma once
/// @file
/// The Trainer's `precision` setting, parsed once at construction.
///
/// @code{.unparsed}
///   "32-true"     fp32 parameters and compute (default)           legacy spellings: 32, "32"
///   "64-true"     fp64 parameters, inputs and compute             legacy: 64, "64"
///   "16-mixed"    fp32 master weights and optimizer state; autocast to f16 around forward and loss
///                 (runtime/autocast.h); dynamic loss scaling (trainer/precision/grad_scaler.h)   legacy: 16, "16"
///   "bf16-mixed"  as 16-mixed with bf16 and no loss scaling                            legacy: "bf16"
///   "16-true"     parameters and floating inputs stored in f16; optimizer state stays fp32 (the fused
///                 optimizer kernels keep acc_t moments); no autocast, no scaler
///   "bf16-true"   the same with bf16
/// @endcode
/// On the CPU, f16/bf16 ops compute in fp32 and round to nearest even, so every mode runs (and is tested)
/// without a GPU. On a GPU, bf16 needs compute capability 8.0 (Ampere) or newer.
#include <cstdint>
#include <string>

#include <volt/runtime/device.h>
#include <volt/runtime/dtype.h>

namespace volt {

/// The loss scaler's settings ("16-mixed"; TrainerOptions::grad_scaler, trainer/precision/grad_scaler.h).
struct GradScalerOptions {
  double init_scale = 65536.0;     ///< 2^16
  double growth_factor = 2.0;      ///< scale *= 2 after growth_interval clean steps in a row
  double backoff_factor = 0.5;     ///< scale *= 0.5 on a step with inf/NaN gradients (which is skipped)
  int64_t growth_interval = 2000;
};

enum class Precision { f32_true, f64_true, f16_mixed, bf16_mixed, f16_true, bf16_true };

/// Parses a precision string (canonical or legacy spelling); anything else is a volt::Error listing the
/// accepted values.
Precision parse_precision(const std::string& s);
/// The canonical spelling ("16-mixed", ...), as results.json, hparams.yaml and checkpoints record it.
const char* precision_name(Precision p);
inline bool is_mixed(Precision p) { return p == Precision::f16_mixed || p == Precision::bf16_mixed; }
/// The dtype parameters (and the inputs of the "-true" modes) are stored in: f32 for the mixed modes.
DType precision_param_dtype(Precision p);
/// The dtype autocast lowers matmul/conv to (mixed modes only).
DType precision_autocast_dtype(Precision p);
/// Throws a volt::Error before training starts when `device` cannot run `p` (bf16 on a GPU older than
/// compute capability 8.0). The CPU runs every mode.
void check_precision_supported(Precision p, Device device);

}  // namespace volt
