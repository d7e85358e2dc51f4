#pragma once
/// @file
/// Parameter-free layers: activations, Flatten, Dropout.
#include <string_view>

#include <volt/nn/module.h>

namespace volt::nn {

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

/// GELU: the exact (erf) form by default; GeluApproximate::Tanh (or "tanh") for the tanh approximation.
class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : approximate(approximate) {}
  explicit GELU(std::string_view approximate) : approximate(parse_gelu_approximate(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  GeluApproximate approximate;
};

/// x * sigmoid(x) (also called swish).
class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string type_name() const override { return "SiLU"; }
};

class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string type_name() const override { return "Sigmoid"; }
};

class LeakyReLU : public UnaryModule {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string type_name() const override { return "LeakyReLU"; }
  double negative_slope;
};

class Identity : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

/// Flattens dims [start_dim, end_dim] into one (a view when strides allow).
class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

/// Zeroes elements with probability p in training (scaling the rest by 1/(1-p)); identity in eval.
/// Masks come from the global Philox generator, so manual_seed makes them reproducible.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;
};

}  // namespace volt::nn
