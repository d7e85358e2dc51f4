#pragma once
/// @file
/// Parameter initialisers (torch.nn.init). Each fills `t` in place, without recording autograd history, from
/// the global Philox generator (volt::default_generator(), seeded by volt::manual_seed) unless `gen` is given,
/// and returns t. Fan-in/fan-out follow PyTorch: for a weight (out, in, k...) fan_in = in * prod(k) and
/// fan_out = out * prod(k).
#include <string>
#include <utility>

#include <volt/kernels/ops.h>

namespace volt::nn::init {

enum class FanMode { FanIn, FanOut };

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
/// Recommended gain for a nonlinearity: "linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu" (param =
/// negative slope, default 0.01), "selu".
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double lo = 0.0, double hi = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
/// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace volt::nn::init
