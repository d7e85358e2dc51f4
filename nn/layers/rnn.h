#pragma once
/// @file
/// Recurrent layers: LSTM and GRU, multi-layer, unidirectional, with PyTorch's gate order, parameter names
/// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then _l1 ...), shapes and init, so a PyTorch state dict
/// loads into them and the outputs match. Each step is written in public ops (linear, sigmoid, tanh, mul, add),
/// so the layers run on every device and floating dtype and backpropagate through time.
///
/// Input x: (L, N, input_size), or (N, L, input_size) with batch_first, or unbatched (L, input_size); L >= 1.
/// Initial states (optional, zeros when undefined): (num_layers, N, hidden_size), or (num_layers, hidden_size)
/// for unbatched input (batch_first does not apply to states, as in PyTorch).
/// Output: the last layer's hidden state at every step, (L, N, hidden_size) (batch_first: (N, L, hidden_size);
/// unbatched: (L, hidden_size)), and each layer's final state(s), shaped like the initial ones.
/// dropout > 0 drops the outputs of every layer but the last while training.
#include <cstdint>
#include <vector>

#include <volt/nn/module.h>

namespace volt::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
};

/// The parameters and checks that LSTM and GRU share; `gates` is 4 (LSTM) or 3 (GRU).
class RNNBase : public Module {
 public:
  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first;
  double dropout;
  /// Per layer: weight_ih (gates * hidden, in), weight_hh (gates * hidden, hidden), bias_ih, bias_hh
  /// (gates * hidden; undefined without bias). Layer 0's input is input_size wide, the others' hidden_size.
  std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;

  /// Every parameter ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch.
  void reset_parameters();
  std::string extra_repr() const override;

 protected:
  RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, const RNNOptions& options);
  /// x as (L, N, input_size) and whether it was batched.
  Tensor sequence_major(const Tensor& x, bool& batched) const;
  /// The initial state of each layer ((N, hidden) each), zeros where `s` is undefined.
  std::vector<Tensor> initial_state(const Tensor& s, const char* name, const Tensor& seq, bool batched) const;
  /// seq (L, N, hidden) back to the caller's layout.
  Tensor output_layout(const Tensor& seq, bool batched) const;
  /// Per-layer final states stacked to (num_layers, N, hidden) (unbatched: (num_layers, hidden)).
  Tensor final_state(const std::vector<Tensor>& per_layer, bool batched) const;
  /// Dropout between layers (not after the last), in training only.
  Tensor between_layers(const Tensor& seq, int64_t layer) const;

  const char* name_;
};

struct LSTMOutput {
  Tensor output;  ///< (L, N, hidden) or per batch_first / unbatched
  Tensor h_n;     ///< (num_layers, N, hidden)
  Tensor c_n;     ///< (num_layers, N, hidden)
};

/// Per step and layer, gates in PyTorch's order i, f, g, o:
///   i = sigmoid(W_ii x + b_ii + W_hi h + b_hi), f = sigmoid(...), g = tanh(...), o = sigmoid(...)
///   c' = f * c + i * g,  h' = o * tanh(c')
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers)
      : LSTM(input_size, hidden_size, RNNOptions{.num_layers = num_layers}) {}
  /// h0 and c0 are both given or both undefined.
  LSTMOutput operator()(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    return call_scoped([&] { return forward(x, h0, c0); });
  }
  LSTMOutput forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  std::string type_name() const override { return "LSTM"; }
};

struct GRUOutput {
  Tensor output;  ///< (L, N, hidden) or per batch_first / unbatched
  Tensor h_n;     ///< (num_layers, N, hidden)
};

/// Per step and layer, gates in PyTorch's order r, z, n:
///   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
///   n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers)
      : GRU(input_size, hidden_size, RNNOptions{.num_layers = num_layers}) {}
  GRUOutput operator()(const Tensor& x, const Tensor& h0 = Tensor()) {
    return call_scoped([&] { return forward(x, h0); });
  }
  GRUOutput forward(const Tensor& x, const Tensor& h0 = Tensor());
  std::string type_name() const override { return "GRU"; }
};

}  // namespace volt::nn
