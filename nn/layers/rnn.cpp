#include <volt/nn/layers/rnn.h>

#include <cmath>

#include <volt/nn/init.h>

namespace volt::nn {

namespace {
std::string shape_of(const Tensor& t) { return t.defined() ? t.shape_str() : std::string("undefined"); }
}  // namespace

RNNBase::RNNBase(const char* name, int64_t gates, int64_t in, int64_t hidden, const RNNOptions& o)
    : input_size(in), hidden_size(hidden), num_layers(o.num_layers), bias(o.bias), batch_first(o.batch_first),
      dropout(o.dropout), name_(name) {
  VOLT_CHECK(in > 0 && hidden > 0 && o.num_layers > 0, name, ": input_size, hidden_size and num_layers must be ",
             "positive, got ", in, ", ", hidden, ", ", o.num_layers);
  VOLT_CHECK(o.dropout >= 0 && o.dropout < 1, name, ": dropout (", o.dropout, ") must be in [0, 1)");
  for (int64_t l = 0; l < num_layers; ++l) {
    const std::string sfx = "_l" + std::to_string(l);
    const int64_t layer_in = l == 0 ? in : hidden;
    weight_ih.push_back(register_parameter("weight_ih" + sfx, empty({gates * hidden, layer_in})));
    weight_hh.push_back(register_parameter("weight_hh" + sfx, empty({gates * hidden, hidden})));
    bias_ih.push_back(bias ? register_parameter("bias_ih" + sfx, empty({gates * hidden})) : Tensor());
    bias_hh.push_back(bias ? register_parameter("bias_hh" + sfx, empty({gates * hidden})) : Tensor());
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (auto* list : {&weight_ih, &weight_hh, &bias_ih, &bias_hh})
    for (Tensor& t : *list)
      if (t.defined()) init::uniform_(t, -bound, bound);
}

std::string RNNBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (num_layers != 1) s += ", num_layers=" + std::to_string(num_layers);
  if (!bias) s += ", bias=False";
  if (batch_first) s += ", batch_first=True";
  if (dropout != 0) s += ", dropout=" + std::to_string(dropout);
  return s;
}

Tensor RNNBase::sequence_major(const Tensor& x, bool& batched) const {
  VOLT_CHECK(x.defined(), name_, ": the input is undefined");
  VOLT_CHECK(is_floating(x.dtype()), name_, ": expected a floating-point input but got ", dtype_name(x.dtype()));
  VOLT_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(-1) == input_size, name_, ": expected input of shape ",
             batch_first ? "(N, L, " : "(L, N, ", input_size, ") or unbatched (L, ", input_size, "), got ",
             x.shape_str());
  batched = x.dim() == 3;
  Tensor seq = !batched ? x.unsqueeze(1) : batch_first ? x.transpose(0, 1) : x;
  VOLT_CHECK(seq.size(0) > 0, name_, ": the input ", x.shape_str(), " has no time steps; expected L >= 1");
  return seq;
}

std::vector<Tensor> RNNBase::initial_state(const Tensor& s, const char* name, const Tensor& seq, bool batched) const {
  const int64_t n = seq.size(1);
  std::vector<Tensor> out;
  if (!s.defined()) {
    Tensor z = zeros({n, hidden_size}, seq.dtype(), seq.device());
    out.assign(static_cast<size_t>(num_layers), z);
    return out;
  }
  const Shape want = batched ? Shape{num_layers, n, hidden_size} : Shape{num_layers, hidden_size};
  VOLT_CHECK(s.shape() == want, name_, ": ", name, " has shape ", shape_of(s), "; expected ", shape_to_string(want),
             " (num_layers, ", batched ? "batch, " : "", "hidden_size)");
  VOLT_CHECK(s.device() == seq.device(), name_, ": ", name, " is on ", s.device().str(), " but the input is on ",
             seq.device().str());
  Tensor b = batched ? s : s.unsqueeze(1);
  for (int64_t l = 0; l < num_layers; ++l) out.push_back(b.select(0, l));
  return out;
}

Tensor RNNBase::output_layout(const Tensor& seq, bool batched) const {
  if (!batched) return seq.squeeze(1);
  return batch_first ? seq.transpose(0, 1) : seq;
}

Tensor RNNBase::final_state(const std::vector<Tensor>& per_layer, bool batched) const {
  Tensor s = stack(per_layer, 0);
  return batched ? s : s.squeeze(1);
}

Tensor RNNBase::between_layers(const Tensor& seq, int64_t layer) const {
  if (dropout == 0 || !is_training() || layer == num_layers - 1) return seq;
  return volt::dropout(seq, dropout, true);
}

LSTM::LSTM(int64_t in, int64_t hidden, RNNOptions o) : RNNBase("LSTM", 4, in, hidden, o) {}

LSTMOutput LSTM::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  VOLT_CHECK(h0.defined() == c0.defined(), "LSTM: pass both h0 and c0 or neither, got h0 ", shape_of(h0), " and c0 ",
             shape_of(c0));
  bool batched = true;
  Tensor seq = sequence_major(x, batched);
  std::vector<Tensor> h = initial_state(h0, "h0", seq, batched), c = initial_state(c0, "c0", seq, batched);
  const int64_t H = hidden_size, steps = seq.size(0);
  for (int64_t l = 0; l < num_layers; ++l) {
    Tensor xi = linear(seq, weight_ih[l], bias_ih[l]);  // (L, N, 4H): the input's share of every step at once
    std::vector<Tensor> outs;
    outs.reserve(static_cast<size_t>(steps));
    Tensor hl = h[l], cl = c[l];
    for (int64_t t = 0; t < steps; ++t) {
      Tensor gates = add(xi.select(0, t), linear(hl, weight_hh[l], bias_hh[l]));  // (N, 4H)
      Tensor i = sigmoid(gates.narrow(1, 0, H)), f = sigmoid(gates.narrow(1, H, H));
      Tensor g = tanh(gates.narrow(1, 2 * H, H)), o = sigmoid(gates.narrow(1, 3 * H, H));
      cl = add(mul(f, cl), mul(i, g));
      hl = mul(o, tanh(cl));
      outs.push_back(hl);
    }
    h[l] = hl;
    c[l] = cl;
    seq = between_layers(stack(outs, 0), l);
  }
  return {output_layout(seq, batched), final_state(h, batched), final_state(c, batched)};
}

GRU::GRU(int64_t in, int64_t hidden, RNNOptions o) : RNNBase("GRU", 3, in, hidden, o) {}

GRUOutput GRU::forward(const Tensor& x, const Tensor& h0) {
  bool batched = true;
  Tensor seq = sequence_major(x, batched);
  std::vector<Tensor> h = initial_state(h0, "h0", seq, batched);
  const int64_t H = hidden_size, steps = seq.size(0);
  for (int64_t l = 0; l < num_layers; ++l) {
    Tensor xi = linear(seq, weight_ih[l], bias_ih[l]);  // (L, N, 3H)
    std::vector<Tensor> outs;
    outs.reserve(static_cast<size_t>(steps));
    Tensor hl = h[l];
    for (int64_t t = 0; t < steps; ++t) {
      Tensor gi = xi.select(0, t), gh = linear(hl, weight_hh[l], bias_hh[l]);  // (N, 3H) each
      Tensor r = sigmoid(add(gi.narrow(1, 0, H), gh.narrow(1, 0, H)));
      Tensor z = sigmoid(add(gi.narrow(1, H, H), gh.narrow(1, H, H)));
      Tensor n = tanh(add(gi.narrow(1, 2 * H, H), mul(r, gh.narrow(1, 2 * H, H))));
      hl = add(mul(rsub(z, 1.0), n), mul(z, hl));
      outs.push_back(hl);
    }
    h[l] = hl;
    seq = between_layers(stack(outs, 0), l);
  }
  return {output_layout(seq, batched), final_state(h, batched)};
}

}  // namespace volt::nn
