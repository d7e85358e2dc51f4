#include <volt/nn/init.h>

#include <cmath>

namespace volt::nn::init {

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  VOLT_CHECK(t.defined() && t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got ",
             t.defined() ? t.shape_str() : std::string("undefined"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  VOLT_FAIL("init::calculate_gain: unknown nonlinearity '", nl,
            "'; expected linear, conv2d, sigmoid, tanh, relu, leaky_relu or selu");
}

namespace {
void check_floating(const Tensor& t, const char* fn) {
  VOLT_CHECK(t.defined(), "init::", fn, ": the tensor is undefined");
  VOLT_CHECK(is_floating(t.dtype()), "init::", fn, ": expected a floating-point tensor, got ", dtype_name(t.dtype()));
}
int64_t fan(const Tensor& t, FanMode mode) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::FanIn ? in : out;
}
}  // namespace

Tensor& uniform_(Tensor& t, double lo, double hi, Generator* gen) {
  check_floating(t, "uniform_");
  NoGradGuard ng;
  t.copy_(rand(t.shape(), t.dtype(), t.device(), gen, lo, hi));
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_floating(t, "normal_");
  NoGradGuard ng;
  t.copy_(randn(t.shape(), t.dtype(), t.device(), gen, mean, std));
  return t;
}

Tensor& constant_(Tensor& t, double value) {
  VOLT_CHECK(t.defined(), "init::constant_: the tensor is undefined");
  NoGradGuard ng;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity, Generator* gen) {
  check_floating(t, "kaiming_uniform_");
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(fan(t, mode)));
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity, Generator* gen) {
  check_floating(t, "kaiming_normal_");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  return normal_(t, 0.0, std, gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  check_floating(t, "xavier_uniform_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  check_floating(t, "xavier_normal_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}

}  // namespace volt::nn::init
