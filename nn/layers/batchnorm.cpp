#include "nn/layers/batchnorm.h"

namespace volt::nn {

BatchNormBase::BatchNormBase(int64_t c, double eps_, double momentum_, bool affine, bool track)
    : num_features(c), eps(eps_), momentum(momentum_) {
  VOLT_CHECK(c > 0, "BatchNorm: num_features must be positive, got ", c);
  if (affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}

void BatchNormBase::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard ng;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

Tensor BatchNormBase::normalize(const Tensor& x) {
  VOLT_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == num_features, type_name(), "::forward: expected input with ",
             num_features, " channels in dim 1, got ", x.defined() ? x.shape_str() : std::string("undefined"));
  const bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard ng;
    if (num_batches_tracked.device().is_cpu()) ++*static_cast<int64_t*>(num_batches_tracked.data_ptr());
    else num_batches_tracked.copy_(add(num_batches_tracked, 1.0));
  }
  // Without running estimates (track_running_stats=false) eval also uses batch statistics.
  return batch_norm(x, weight, bias, running_mean, running_var, use_batch_stats, momentum, eps);
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), "BatchNorm1d::forward: expected (N, C) or (N, C, L) input, got ",
             x.defined() ? x.shape_str() : std::string("undefined"));
  if (x.dim() == 3) return normalize(x.unsqueeze(3)).squeeze(3);
  return normalize(x);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  VOLT_CHECK(x.defined() && x.dim() == 4, "BatchNorm2d::forward: expected (N, C, H, W) input, got ",
             x.defined() ? x.shape_str() : std::string("undefined"));
  return normalize(x);
}

std::string BatchNormBase::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + std::to_string(eps) + ", momentum=" + std::to_string(momentum);
}

}  // namespace volt::nn
