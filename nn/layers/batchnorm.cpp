#include <volt/nn/layers/batchnorm.h>

#include <volt/kernels/autograd.h>
#include <volt/kernels/graph.h>
#include <volt/nn/replica.h>

namespace volt::nn {

namespace {
// sum(t) over every process, differentiable: the gradient of every process's loss reaches each input through
// the same sum of the incoming gradients.
Tensor summed_across(const Tensor& t, const BatchNormBase::SumAcrossProcesses& sum) {
  Tensor out;
  {
    NoGradGuard ng;
    out = t.detach().clone();
    sum(out);
  }
  autograd::attach(out, "SyncBatchNormAllReduceBackward", {t}, [sum](const std::vector<Tensor>& g) {
    Tensor grad = g[0].detach().clone();
    sum(grad);
    return std::vector<Tensor>{grad};
  });
  return out;
}
}  // namespace

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
  // Data-parallel replicas share this layer: only replica 0 updates the running estimates (nn/replica.h).
  if (is_training() && replica_index() != 0) {
    VOLT_CHECK(!sync_, type_name(), ": synchronised batch norm (sync_batchnorm) cannot run inside data-parallel ",
               "replicas (strategy dp/ddp2); use strategy=\"ddp\" with sync_batchnorm");
    return batch_norm(x, weight, bias, Tensor(), Tensor(), /*training=*/true, momentum, eps);
  }
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard ng;
    // On the host directly, except under a CPU graph capture (kernels/graph.h), which replays kernels only.
    if (num_batches_tracked.device().is_cpu() && Graph::capturing(kCPU) == nullptr)
      ++*static_cast<int64_t*>(num_batches_tracked.data_ptr());
    else num_batches_tracked.copy_(add(num_batches_tracked, 1.0));
  }
  if (sync_ && is_training()) return synced_batch_norm(x);
  // Without running estimates (track_running_stats=false) eval also uses batch statistics.
  return batch_norm(x, weight, bias, running_mean, running_var, use_batch_stats, momentum, eps);
}

Tensor BatchNormBase::synced_batch_norm(const Tensor& x) {
  const int64_t C = num_features;
  std::vector<int64_t> dims{0};
  Shape per_channel(static_cast<size_t>(x.dim()), 1);
  per_channel[1] = C;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  // Statistics in f32 (f64 for f64 input), of x shifted by the running mean (the same on every process), which
  // keeps E[(x-k)^2] - E[x-k]^2 clear of cancellation once the estimates have settled.
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor xf = x.to(acc);
  Tensor shift = running_mean.defined() ? running_mean.detach().to(acc) : zeros({C}, acc, x.device());
  Tensor d = xf - shift.reshape(per_channel);
  const double local_count = static_cast<double>(x.numel() / C);
  Tensor local = cat({d.sum(dims), (d * d).sum(dims), full({1}, local_count, acc, x.device())}, 0);
  Tensor global = summed_across(local, sync_);  // (2C + 1): sums of d, of d^2, and the element count
  Tensor count = global.narrow(0, 2 * C, 1).detach();
  Tensor mean_d = global.narrow(0, 0, C) / count;
  Tensor var = global.narrow(0, C, C) / count - mean_d * mean_d;  // biased, as normalisation uses
  Tensor mean = mean_d + shift;
  Tensor out = (xf - mean.reshape(per_channel)) * pow(var + eps, -0.5).reshape(per_channel);
  if (weight.defined()) out = out * weight.to(acc).reshape(per_channel);
  if (bias.defined()) out = out + bias.to(acc).reshape(per_channel);
  if (running_mean.defined()) {
    NoGradGuard ng;
    // Running variance with the unbiased estimate over the combined batch.
    Tensor unbiased = var.detach() * (count / (count - 1.0));
    running_mean.copy_((running_mean.to(acc) * (1.0 - momentum) + mean.detach() * momentum).to(running_mean.dtype()));
    running_var.copy_((running_var.to(acc) * (1.0 - momentum) + unbiased * momentum).to(running_var.dtype()));
  }
  return out.to(x.dtype());
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
