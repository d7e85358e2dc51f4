#pragma once
#include <functional>

#include <volt/nn/module.h>

namespace volt::nn {

/// Batch normalisation over the channel dim (dim 1). Parameters weight (C) = 1, bias (C) = 0 when affine;
/// buffers running_mean (C) = 0, running_var (C) = 1, num_batches_tracked () i64 when tracking. In training mode
/// it normalises with batch statistics and updates the running estimates with `momentum`; in eval it uses them.
/// Inside a data-parallel replica other than 0 (nn/replica.h) training mode normalises with the batch statistics
/// but leaves the running estimates and num_batches_tracked alone: replica 0's slice updates them.
///
/// Synchronised statistics (the Trainer's sync_batchnorm under DDP): with set_sync(sum), training-mode batches
/// are normalised with the mean and variance of the batches of every process together (as one batch of their
/// combined size), the running estimates follow those, and the backward carries the gradient of every process's
/// loss through the shared statistics. `sum` adds a tensor over all processes in place; it is a collective, which
/// every process reaches in the same order because every process runs the same forward and backward.
class BatchNormBase : public UnaryModule {
 public:
  BatchNormBase(int64_t num_features, double eps, double momentum, bool affine, bool track_running_stats);
  void reset_running_stats();
  std::string extra_repr() const override;
  using SumAcrossProcesses = std::function<void(Tensor&)>;
  /// nullptr: per-process statistics (the default).
  void set_sync(SumAcrossProcesses sum) { sync_ = std::move(sum); }
  bool synced() const { return static_cast<bool>(sync_); }

  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias;                                 ///< (C)
  Tensor running_mean, running_var, num_batches_tracked;  ///< (C), (C), ()

 protected:
  Tensor normalize(const Tensor& x);  ///< x (N, C) or (N, C, H, W)

 private:
  Tensor synced_batch_norm(const Tensor& x);  ///< training mode with set_sync
  SumAcrossProcesses sync_;
};

/// Input (N, C) or (N, C, L).
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
};

/// Input (N, C, H, W).
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
};

}  // namespace volt::nn
