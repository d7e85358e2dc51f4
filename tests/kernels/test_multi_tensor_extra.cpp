// Multi-tensor RMSprop, Adagrad and Lion updates (kernels/optim_extra.h): bit-for-bit equality with the
// single-tensor ops on the CPU and, when one is present, on each GPU (where a list is one chunked launch of the
// shared state-update kernel, or several when it exceeds one argument block), for every state layout (RMSprop
// keeps one, two or three state tensors), half parameters with f32 or half state, and lists larger than a launch.
#include <gtest/gtest.h>

#include <cstring>

#include "common/gradcheck.h"
#include <volt/kernels/optim_extra.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;

namespace {

Tensor values(const Shape& s, uint64_t seed, DType dt, Device d, double lo = -1, double hi = 1) {
  return add(mul(rand_with_seed(s, seed, 0, DType::f64), hi - lo), lo).to(d, dt);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::vector<Device> devices() {
  std::vector<Device> d{kCPU};
  for (int i = 0; i < cuda_device_count(); ++i) d.push_back(cuda_device(i));
  return d;
}

Tensor state(const Shape& s, DType dt, Device d, bool used, double init = 0.0) {
  return used ? full(s, init, dt, d) : Tensor();
}

// Three steps over `shapes` with the multi-tensor op and with one single-tensor op per entry (step_one), then
// every tensor of every entry (tensors_of) must agree bit for bit, and the parameters must have moved.
template <class Entry, class Make, class StepOne, class StepMulti, class TensorsOf>
void multi_matches_single(const std::vector<Shape>& shapes, DType dt, Device d, Make make, StepOne step_one,
                          StepMulti step_multi, TensorsOf tensors_of) {
  std::vector<Entry> multi, single;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = values(shapes[i], 10 + i, dt, d);
    multi.push_back(make(p.clone(), shapes[i]));
    single.push_back(make(p.clone(), shapes[i]));
  }
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor g = values(shapes[i], 100 * step + i, dt, d, -2, 2);
      multi[i].grad = g;
      single[i].grad = g;
      step_one(single[i], step);
    }
    step_multi(multi, step);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::vector<Tensor> a = tensors_of(multi[i]), b = tensors_of(single[i]);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(same_bits(a[k], b[k])) << "entry " << i << " tensor " << k;
    if (multi[i].param.numel() > 0)
      EXPECT_FALSE(same_bits(multi[i].param, values(shapes[i], 10 + i, dt, d))) << "param " << i << " unchanged";
  }
}

void rmsprop_case(const std::vector<Shape>& shapes, DType dt, DType state_dt, Device d, RmspropHyper h) {
  const bool mom = h.momentum != 0.0;
  multi_matches_single<RmspropTensors>(
      shapes, dt, d,
      [&](const Tensor& p, const Shape& s) {
        return RmspropTensors{p, Tensor(), state(s, state_dt, d, true), state(s, state_dt, d, mom),
                              state(s, state_dt, d, h.centered)};
      },
      [&](RmspropTensors& t, int) { rmsprop_step_(t.param, t.grad, t.square_avg, t.momentum_buffer, t.grad_avg, h); },
      [&](std::vector<RmspropTensors>& l, int) { rmsprop_step_multi_(l, h); },
      [](const RmspropTensors& t) {
        return std::vector<Tensor>{t.param, t.square_avg, t.momentum_buffer, t.grad_avg};
      });
}

void adagrad_case(const std::vector<Shape>& shapes, DType dt, DType state_dt, Device d, AdagradHyper h, double init) {
  multi_matches_single<AdagradTensors>(
      shapes, dt, d,
      [&](const Tensor& p, const Shape& s) { return AdagradTensors{p, Tensor(), state(s, state_dt, d, true, init)}; },
      [&](AdagradTensors& t, int step) {
        AdagradHyper hs = h;
        hs.step = step;
        adagrad_step_(t.param, t.grad, t.sum, hs);
      },
      [&](std::vector<AdagradTensors>& l, int step) {
        AdagradHyper hs = h;
        hs.step = step;
        adagrad_step_multi_(l, hs);
      },
      [](const AdagradTensors& t) { return std::vector<Tensor>{t.param, t.sum}; });
}

void lion_case(const std::vector<Shape>& shapes, DType dt, DType state_dt, Device d, LionHyper h) {
  multi_matches_single<LionTensors>(
      shapes, dt, d,
      [&](const Tensor& p, const Shape& s) { return LionTensors{p, Tensor(), state(s, state_dt, d, true)}; },
      [&](LionTensors& t, int) { lion_step_(t.param, t.grad, t.exp_avg, h); },
      [&](std::vector<LionTensors>& l, int) { lion_step_multi_(l, h); },
      [](const LionTensors& t) { return std::vector<Tensor>{t.param, t.exp_avg}; });
}

}  // namespace

TEST(MultiTensorOptimExtra, RmspropMatchesTheSingleTensorOpBitForBit) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {0}, {33, 65}, {1}};
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    rmsprop_case(shapes, DType::f32, DType::f32, d, {.lr = 0.01});
    rmsprop_case(shapes, DType::f64, DType::f64, d, {.lr = 0.01, .weight_decay = 0.1, .momentum = 0.9});
    rmsprop_case(shapes, DType::f32, DType::f32, d, {.lr = 0.01, .alpha = 0.9, .centered = true});
    rmsprop_case(shapes, DType::bf16, DType::f32, d, {.lr = 0.01, .momentum = 0.5, .centered = true});
    rmsprop_case(shapes, DType::f16, DType::f16, d, {.lr = 0.001, .momentum = 0.5});
  }
}

TEST(MultiTensorOptimExtra, AdagradMatchesTheSingleTensorOpBitForBit) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {0}, {33, 65}, {1}};
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    adagrad_case(shapes, DType::f32, DType::f32, d, {.lr = 0.05}, 0.0);
    adagrad_case(shapes, DType::f64, DType::f64, d, {.lr = 0.05, .lr_decay = 0.3, .weight_decay = 0.1}, 0.2);
    adagrad_case(shapes, DType::bf16, DType::f32, d, {.lr = 0.05, .lr_decay = 0.1}, 0.1);
    adagrad_case(shapes, DType::f16, DType::f16, d, {.lr = 0.01}, 0.5);
  }
}

TEST(MultiTensorOptimExtra, LionMatchesTheSingleTensorOpBitForBit) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {0}, {33, 65}, {1}};
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    lion_case(shapes, DType::f32, DType::f32, d, {.lr = 0.01});
    lion_case(shapes, DType::f64, DType::f64, d, {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .weight_decay = 0.1});
    lion_case(shapes, DType::bf16, DType::f32, d, {.lr = 0.01, .weight_decay = 0.1});
    lion_case(shapes, DType::f16, DType::f16, d, {.lr = 0.01});
  }
}

TEST(MultiTensorOptimExtra, ListsLargerThanOneLaunch) {
  // On a GPU: 30 tensors (more than one argument block names) and one tensor of more chunks than a block holds,
  // with all three RMSprop state tensors in the argument block. On the CPU the same lists run through the loop.
  std::vector<Shape> many(30, Shape{1000});
  many.push_back({65536 * 161 + 5});
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    rmsprop_case(many, DType::f32, DType::f32, d, {.lr = 0.01, .momentum = 0.9, .centered = true});
  }
}

TEST(MultiTensorOptimExtra, EmptyListsDoNothing) {
  rmsprop_step_multi_({}, RmspropHyper{});
  adagrad_step_multi_({}, AdagradHyper{});
  lion_step_multi_({}, LionHyper{});
}
