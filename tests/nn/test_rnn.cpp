// nn::LSTM and nn::GRU: outputs and final states against a naive f64 implementation of PyTorch's equations,
// parameter names and shapes (PyTorch's), layouts (batch_first, unbatched), gradients through time against
// finite differences, dropout between layers, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/gradcheck.h"
#include <volt/nn.h>

using namespace volt;
using volt::testing::expect_close;
using volt::testing::expect_gradients_match;
using volt::testing::expect_param_gradients_match;
using volt::testing::rand_f64;

namespace {

using Vec = std::vector<double>;
double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// One layer's pre-activations for gate rows [g*H, (g+1)*H): W_ih x + b_ih and W_hh h + b_hh, separately (the
// GRU's n gate needs them apart).
struct Affine {
  Vec wi, wh, bi, bh;
  int64_t in, H;
  Vec ih(const Vec& x, int64_t gates) const {
    Vec out(static_cast<size_t>(gates * H));
    for (int64_t r = 0; r < gates * H; ++r) {
      double s = bi.empty() ? 0 : bi[r];
      for (int64_t k = 0; k < in; ++k) s += wi[r * in + k] * x[k];
      out[r] = s;
    }
    return out;
  }
  Vec hh(const Vec& h, int64_t gates) const {
    Vec out(static_cast<size_t>(gates * H));
    for (int64_t r = 0; r < gates * H; ++r) {
      double s = bh.empty() ? 0 : bh[r];
      for (int64_t k = 0; k < H; ++k) s += wh[r * H + k] * h[k];
      out[r] = s;
    }
    return out;
  }
};

Affine layer_params(const nn::RNNBase& m, int64_t l) {
  Affine a;
  a.wi = m.weight_ih[l].to_vector<double>();
  a.wh = m.weight_hh[l].to_vector<double>();
  if (m.bias) {
    a.bi = m.bias_ih[l].to_vector<double>();
    a.bh = m.bias_hh[l].to_vector<double>();
  }
  a.in = m.weight_ih[l].size(1);
  a.H = m.hidden_size;
  return a;
}

// x (L, N, in), h0/c0 (layers, N, H) as flat vectors. Returns output (L, N, H), h_n, c_n flat.
struct RefOut {
  Vec out, h, c;
};
RefOut reference(const nn::RNNBase& m, bool lstm, const Tensor& x, const Tensor& h0, const Tensor& c0) {
  const int64_t L = x.size(0), N = x.size(1), H = m.hidden_size;
  std::vector<Vec> seq(static_cast<size_t>(L * N));  // [t * N + n] -> features
  const Vec xv = x.to_vector<double>();
  for (int64_t t = 0; t < L; ++t)
    for (int64_t n = 0; n < N; ++n)
      seq[t * N + n] = Vec(xv.begin() + (t * N + n) * x.size(2), xv.begin() + (t * N + n + 1) * x.size(2));
  const Vec hv = h0.to_vector<double>(), cv = lstm ? c0.to_vector<double>() : Vec();
  RefOut r;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    Affine a = layer_params(m, l);
    for (int64_t n = 0; n < N; ++n) {
      Vec h(hv.begin() + (l * N + n) * H, hv.begin() + (l * N + n + 1) * H);
      Vec c = lstm ? Vec(cv.begin() + (l * N + n) * H, cv.begin() + (l * N + n + 1) * H) : Vec();
      for (int64_t t = 0; t < L; ++t) {
        if (lstm) {
          Vec gi = a.ih(seq[t * N + n], 4), gh = a.hh(h, 4);
          for (int64_t j = 0; j < H; ++j) {
            const double i = sig(gi[j] + gh[j]), f = sig(gi[H + j] + gh[H + j]);
            const double g = std::tanh(gi[2 * H + j] + gh[2 * H + j]), o = sig(gi[3 * H + j] + gh[3 * H + j]);
            c[j] = f * c[j] + i * g;
            h[j] = o * std::tanh(c[j]);
          }
        } else {
          Vec gi = a.ih(seq[t * N + n], 3), gh = a.hh(h, 3);
          Vec next(static_cast<size_t>(H));
          for (int64_t j = 0; j < H; ++j) {
            const double rr = sig(gi[j] + gh[j]), z = sig(gi[H + j] + gh[H + j]);
            const double nn_ = std::tanh(gi[2 * H + j] + rr * gh[2 * H + j]);
            next[j] = (1 - z) * nn_ + z * h[j];
          }
          h = next;
        }
        seq[t * N + n] = h;  // this layer's output feeds the next layer
      }
      r.h.insert(r.h.end(), h.begin(), h.end());
      r.c.insert(r.c.end(), c.begin(), c.end());
    }
  }
  // r.h / r.c were appended per (layer, n): the (layers, N, H) order.
  for (int64_t t = 0; t < L; ++t)
    for (int64_t n = 0; n < N; ++n) r.out.insert(r.out.end(), seq[t * N + n].begin(), seq[t * N + n].end());
  return r;
}

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

}  // namespace

TEST(RNN, ParameterNamesShapesAndInit) {
  nn::LSTM lstm(3, 5, 2);
  EXPECT_EQ(names(lstm), (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                                   "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"}));
  EXPECT_EQ(lstm.weight_ih[0].shape(), (Shape{20, 3}));
  EXPECT_EQ(lstm.weight_hh[0].shape(), (Shape{20, 5}));
  EXPECT_EQ(lstm.weight_ih[1].shape(), (Shape{20, 5}));
  EXPECT_EQ(lstm.bias_hh[1].shape(), (Shape{20}));
  for (const Tensor& p : lstm.parameters())
    for (double v : p.to_vector<double>()) EXPECT_LE(std::abs(v), 1 / std::sqrt(5.0));
  nn::GRU gru(4, 6, {.bias = false});
  EXPECT_EQ(names(gru), (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0"}));
  EXPECT_EQ(gru.weight_ih[0].shape(), (Shape{18, 4}));
  EXPECT_EQ(lstm.extra_repr(), "3, 5, num_layers=2");
  EXPECT_EQ(gru.extra_repr(), "4, 6, bias=False");
}

TEST(RNN, LstmMatchesReference) {
  nn::LSTM lstm(3, 4, 2);
  lstm.to(DType::f64);
  Tensor x = rand_f64({5, 2, 3}, 1), h0 = rand_f64({2, 2, 4}, 2), c0 = rand_f64({2, 2, 4}, 3);
  auto [out, h, c] = lstm(x, h0, c0);
  RefOut r = reference(lstm, true, x, h0, c0);
  EXPECT_EQ(out.shape(), (Shape{5, 2, 4}));
  EXPECT_EQ(h.shape(), (Shape{2, 2, 4}));
  expect_close(out, r.out, 1e-12, 1e-12);
  expect_close(h, r.h, 1e-12, 1e-12);
  expect_close(c, r.c, 1e-12, 1e-12);
  // Zero initial states by default.
  auto z = lstm(x);
  RefOut rz = reference(lstm, true, x, zeros({2, 2, 4}, DType::f64), zeros({2, 2, 4}, DType::f64));
  expect_close(z.output, rz.out, 1e-12, 1e-12);
  expect_close(z.c_n, rz.c, 1e-12, 1e-12);
}

TEST(RNN, GruMatchesReference) {
  nn::GRU gru(3, 4, 2);
  gru.to(DType::f64);
  Tensor x = rand_f64({5, 2, 3}, 4), h0 = rand_f64({2, 2, 4}, 5);
  auto [out, h] = gru(x, h0);
  RefOut r = reference(gru, false, x, h0, Tensor());
  expect_close(out, r.out, 1e-12, 1e-12);
  expect_close(h, r.h, 1e-12, 1e-12);
}

TEST(RNN, BatchFirstUnbatchedAndStateDictTransfer) {
  nn::LSTM a(3, 4, 2);
  nn::LSTM b(3, 4, {.num_layers = 2, .batch_first = true});
  b.load_state_dict(a.state_dict());
  Tensor x = randn({6, 2, 3});
  auto ra = a(x);
  auto rb = b(x.transpose(0, 1));
  EXPECT_EQ(rb.output.shape(), (Shape{2, 6, 4}));
  expect_close(rb.output, ra.output.transpose(0, 1).to_vector<double>(), 1e-6);
  expect_close(rb.h_n, ra.h_n.to_vector<double>(), 1e-6);  // states are (layers, N, H) even with batch_first
  // Unbatched (L, in): states (layers, H).
  auto ru = a(x.select(1, 1), zeros({2, 4}), zeros({2, 4}));
  EXPECT_EQ(ru.output.shape(), (Shape{6, 4}));
  EXPECT_EQ(ru.h_n.shape(), (Shape{2, 4}));
  expect_close(ru.output, ra.output.select(1, 1).to_vector<double>(), 1e-6);
  nn::GRU g(3, 4, {.batch_first = true});
  auto rg = g(x.transpose(0, 1));
  nn::GRU g2(3, 4);
  g2.load_state_dict(g.state_dict());
  expect_close(rg.output, g2(x).output.transpose(0, 1).to_vector<double>(), 1e-6);
}

TEST(RNN, GradientsThroughTime) {
  nn::LSTM lstm(2, 3, 2);
  lstm.to(DType::f64);
  Tensor x = rand_f64({4, 2, 2}, 6);
  expect_param_gradients_match([&] { return lstm(x).output; }, lstm.parameters());
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        auto r = lstm(in[0], in[1], in[2]);
        return cat({r.output.flatten(), r.h_n.flatten(), r.c_n.flatten()}, 0);
      },
      {rand_f64({4, 2, 2}, 7).set_requires_grad(true), rand_f64({2, 2, 3}, 8).set_requires_grad(true),
       rand_f64({2, 2, 3}, 9).set_requires_grad(true)});
  nn::GRU gru(2, 3, {.num_layers = 2, .batch_first = true});
  gru.to(DType::f64);
  expect_param_gradients_match([&] { return gru(x).h_n; }, gru.parameters());
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) { return gru(in[0], in[1]).output; },
      {rand_f64({2, 4, 2}, 10).set_requires_grad(true), rand_f64({2, 2, 3}, 11).set_requires_grad(true)});
}

TEST(RNN, DropoutBetweenLayersOnlyInTraining) {
  nn::GRU gru(3, 8, {.num_layers = 2, .dropout = 0.5});
  nn::GRU plain(3, 8, 2);
  plain.load_state_dict(gru.state_dict());
  Tensor x = randn({4, 2, 3});
  gru.eval();
  expect_close(gru(x).output, plain(x).output.to_vector<double>(), 0, 0);
  gru.train();
  const auto a = gru(x).output.to_vector<double>(), b = plain(x).output.to_vector<double>();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::abs(a[i] - b[i]);
  EXPECT_GT(diff, 1e-3);
  // One layer: nothing to drop between.
  nn::LSTM one(3, 4, {.dropout = 0.5});
  nn::LSTM one_plain(3, 4);
  one_plain.load_state_dict(one.state_dict());
  expect_close(one(x).output, one_plain(x).output.to_vector<double>(), 0, 0);
}

TEST(RNN, Errors) {
  nn::LSTM lstm(3, 4, 2);
  VOLT_EXPECT_ERROR(lstm(randn({5, 2, 4})), "LSTM", "(L, N, 3)", "(5, 2, 4)");
  VOLT_EXPECT_ERROR(lstm(randn({5, 2, 3}), randn({2, 2, 4})), "LSTM", "both h0 and c0");
  VOLT_EXPECT_ERROR(lstm(randn({5, 2, 3}), randn({1, 2, 4}), randn({2, 2, 4})), "LSTM", "h0 has shape (1, 2, 4)",
                    "expected (2, 2, 4)");
  VOLT_EXPECT_ERROR(lstm(randn({0, 2, 3})), "LSTM", "no time steps");
  nn::GRU gru(3, 4, {.batch_first = true});
  VOLT_EXPECT_ERROR(gru(randn({2, 5, 3}), randn({2, 4})), "GRU", "h0 has shape (2, 4)", "expected (1, 2, 4)");
  VOLT_EXPECT_ERROR(gru(randn({2, 5, 3, 1})), "GRU", "(N, L, 3)");
  VOLT_EXPECT_ERROR(nn::GRU(3, 0), "GRU", "hidden_size");
  VOLT_EXPECT_ERROR(nn::LSTM(3, 4, {.dropout = 1.0}), "LSTM", "dropout (1)");
}
