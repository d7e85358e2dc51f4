#pragma once
/// @file
/// Autocast: the per-thread switch that mixed precision ("16-mixed", "bf16-mixed") turns on around the
/// forward pass and the loss. While it is on, the ops follow one policy (applied in kernels/ops):
///
/// @code
///   lower precision  matmul, linear, conv2d (and batched matmul): floating inputs are cast to the autocast
///                    dtype (f16 or bf16) and the product runs there (tensor cores on CUDA, fp32 accumulation;
///                    on the CPU computed in fp32 and rounded to nearest even);
///   fp32             softmax, log_softmax, cross_entropy, nll_loss, mse_loss, batch_norm, sum, mean, var,
///                    exp, log, pow, rdiv (reciprocal): f16/bf16 inputs are cast to f32 and the result is f32;
///   widest input     every other op (add, mul, relu, where, cat, ...): mixed dtypes promote as usual
///                    (promote_types), so f16 + f32 is f32 and relu of f16 stays f16.
/// @endcode
///
/// The casts are autograd ops, so gradients come back to each input in that input's own dtype: fp32 master
/// weights get fp32 gradients. Backward itself never autocasts (the engine turns it off while it runs
/// backward formulas); its ops run in the dtypes the forward recorded.
#include <volt/runtime/dtype.h>

namespace volt {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;  ///< f16 or bf16
};

/// This thread's state.
AutocastState autocast_state();
inline bool autocast_enabled() { return autocast_state().enabled; }

/// RAII: sets the state for this scope and restores the previous one. `AutocastGuard(false)` opens a region of
/// user code that runs in the dtypes it is given, inside an autocast region; `AutocastGuard(true, dtype)` turns
/// it on. dtype must be f16 or bf16.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled, DType dtype);
  explicit AutocastGuard(bool enabled) : AutocastGuard(enabled, autocast_state().dtype) {}
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState prev_;
};

}  // namespace volt
