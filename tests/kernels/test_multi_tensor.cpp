// Multi-tensor optimizer updates (kernels/ops.h adam_step_multi_ / sgd_step_multi_): the launch plan of
// kernels/common/multi_tensor.h, bit-for-bit equality with the single-tensor ops (on the CPU, and on each GPU when
// one is present: there a whole list is one chunked launch, or several when it exceeds one argument block), the
// argument checks, and the optimizers' grouping of a parameter group into such lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "common/gradcheck.h"
#include <volt/kernels/common/multi_tensor.h>
#include <volt/nn/optim.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;

namespace {

namespace mt = volt::multi_tensor;

// Every element of every non-empty tensor is in exactly one chunk; the limits hold; tensors keep list order.
void check_plan(const std::vector<int64_t>& numels, int64_t chunk, int max_tensors, int max_chunks) {
  const auto launches = mt::plan(numels, chunk, max_tensors, max_chunks);
  std::map<int, std::set<int64_t>> begins;
  int last_tensor = -1;
  for (const auto& l : launches) {
    ASSERT_FALSE(l.chunks.empty());
    ASSERT_LE(static_cast<int>(l.tensors.size()), max_tensors);
    ASSERT_LE(static_cast<int>(l.chunks.size()), max_chunks);
    for (const auto& c : l.chunks) {
      ASSERT_GE(c.tensor, 0);
      ASSERT_LT(c.tensor, static_cast<int>(l.tensors.size()));
      const int t = l.tensors[static_cast<size_t>(c.tensor)];
      ASSERT_GE(t, last_tensor) << "tensors out of order";
      last_tensor = t;
      ASSERT_EQ(c.begin % chunk, 0);
      ASSERT_LT(c.begin, numels[static_cast<size_t>(t)]);
      ASSERT_TRUE(begins[t].insert(c.begin).second) << "chunk listed twice";
    }
  }
  for (size_t t = 0; t < numels.size(); ++t) {
    const int64_t expected = (numels[t] + chunk - 1) / chunk;
    EXPECT_EQ(static_cast<int64_t>(begins[static_cast<int>(t)].size()), expected) << "tensor " << t;
  }
}

Tensor values(const Shape& s, uint64_t seed, DType dt, Device d, double lo = -1, double hi = 1) {
  return add(mul(rand_with_seed(s, seed, 0, DType::f64), hi - lo), lo).to(d, dt);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Runs three Adam steps over `shapes` with the multi-tensor op and with one op per tensor; every parameter and
// state tensor must agree bit for bit.
void adam_multi_matches_single(const std::vector<Shape>& shapes, DType dt, DType state_dt, Device d, AdamHyper h) {
  std::vector<AdamTensors> multi, single;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = values(shapes[i], 10 + i, dt, d);
    auto make = [&](const Tensor& param) {
      return AdamTensors{param, Tensor(), zeros(shapes[i], state_dt, d), zeros(shapes[i], state_dt, d),
                         h.amsgrad ? zeros(shapes[i], state_dt, d) : Tensor()};
    };
    multi.push_back(make(p.clone()));
    single.push_back(make(p.clone()));
  }
  for (int step = 1; step <= 3; ++step) {
    h.step = step;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor g = values(shapes[i], 100 * step + i, dt, d, -2, 2);
      multi[i].grad = g;
      single[i].grad = g;
      adam_step_(single[i].param, g, single[i].exp_avg, single[i].exp_avg_sq, single[i].max_exp_avg_sq, h);
    }
    adam_step_multi_(multi, h);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(same_bits(multi[i].param, single[i].param)) << "param " << i << " " << dtype_name(dt);
    EXPECT_TRUE(same_bits(multi[i].exp_avg, single[i].exp_avg)) << "exp_avg " << i;
    EXPECT_TRUE(same_bits(multi[i].exp_avg_sq, single[i].exp_avg_sq)) << "exp_avg_sq " << i;
    if (h.amsgrad) EXPECT_TRUE(same_bits(multi[i].max_exp_avg_sq, single[i].max_exp_avg_sq)) << "max " << i;
    // and the update did something
    if (multi[i].param.numel() > 0)
      EXPECT_FALSE(same_bits(multi[i].param, values(shapes[i], 10 + i, dt, d))) << "param " << i << " unchanged";
  }
}

void sgd_multi_matches_single(const std::vector<Shape>& shapes, DType dt, Device d, SgdHyper h) {
  std::vector<SgdTensors> multi, single;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = values(shapes[i], 20 + i, dt, d);
    Tensor buf = h.momentum != 0.0 ? zeros(shapes[i], dt == DType::f64 ? DType::f64 : DType::f32, d) : Tensor();
    multi.push_back({p.clone(), Tensor(), buf.defined() ? buf.clone() : Tensor()});
    single.push_back({p.clone(), Tensor(), buf.defined() ? buf.clone() : Tensor()});
  }
  for (int step = 1; step <= 3; ++step) {
    h.first_step = step == 1;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor g = values(shapes[i], 200 * step + i, dt, d, -2, 2);
      multi[i].grad = g;
      single[i].grad = g;
      sgd_step_(single[i].param, g, single[i].momentum_buffer, h);
    }
    sgd_step_multi_(multi, h);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(same_bits(multi[i].param, single[i].param)) << "param " << i << " " << dtype_name(dt);
    if (h.momentum != 0.0) EXPECT_TRUE(same_bits(multi[i].momentum_buffer, single[i].momentum_buffer)) << i;
  }
}

std::vector<Device> devices() {
  std::vector<Device> d{kCPU};
  for (int i = 0; i < cuda_device_count(); ++i) d.push_back(cuda_device(i));
  return d;
}

}  // namespace

TEST(MultiTensorPlan, CoversEveryElementOnceWithinTheLimits) {
  check_plan({}, 4, 2, 3);
  check_plan({0, 0}, 4, 2, 3);
  check_plan({1}, 4, 2, 3);
  check_plan({4, 5, 0, 12, 3, 1, 1, 1}, 4, 2, 3);
  check_plan({100}, 7, 24, 5);                       // one tensor over several launches
  check_plan(std::vector<int64_t>(50, 3), 4, 24, 160);  // more tensors than one launch takes
  check_plan({65536 * 3 + 1, 17, 65536}, 65536, 24, 160);
}

// The chunk length follows the list's size: short chunks (many blocks) for small models, long ones (few
// launches) for large ones.
TEST(MultiTensorPlan, ChunkLengthFollowsTheListSize) {
  // The MNIST MLP (784-128-10): 52 chunks of 2048 fit one launch of 160.
  const std::vector<int64_t> mlp = {128 * 784, 128, 10 * 128, 10};
  EXPECT_EQ(mt::chunk_for(mlp, 160, 2048, 65536), 2048);
  EXPECT_EQ(mt::plan(mlp, 2048, 24, 160).size(), 1u);
  EXPECT_EQ(mt::plan(mlp, 2048, 24, 160)[0].chunks.size(), 52u);
  // 1M elements: 2048 would need 489 chunks, 4096 245, 8192 123 <= 160.
  EXPECT_EQ(mt::chunk_for({1'000'000}, 160, 2048, 65536), 8192);
  // Beyond what the longest chunk fits in one launch: the longest (several launches).
  EXPECT_EQ(mt::chunk_for({100'000'000}, 160, 2048, 65536), 65536);
  // Per-tensor rounding counts: 200 one-element tensors never fit 160 chunks, whatever the length.
  EXPECT_EQ(mt::chunk_for(std::vector<int64_t>(200, 1), 160, 2048, 65536), 65536);
  EXPECT_EQ(mt::chunk_for({}, 160, 2048, 65536), 2048);
  EXPECT_EQ(mt::chunk_for({4096}, 1, 1024, 65536), 4096);  // the smallest power-of-two multiple of min that fits
  VOLT_EXPECT_ERROR(mt::chunk_for({1}, 160, 0, 64), "multi_tensor::chunk_for", "min_chunk=0");
  VOLT_EXPECT_ERROR(mt::chunk_for({1}, 160, 128, 64), "multi_tensor::chunk_for", "max_chunk=64");
}

TEST(MultiTensorPlan, SplitsWhereAnArgumentBlockIsFull) {
  // 3 tensors of 10 elements in chunks of 4: 3 chunks each; at most 4 chunks per launch.
  const auto l = mt::plan({10, 10, 10}, 4, 24, 4);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].tensors, (std::vector<int>{0, 1}));
  ASSERT_EQ(l[0].chunks.size(), 4u);
  EXPECT_EQ(l[0].chunks[3].tensor, 1);
  EXPECT_EQ(l[0].chunks[3].begin, 0);
  EXPECT_EQ(l[1].tensors, (std::vector<int>{1, 2}));  // tensor 1 continues in the next launch
  EXPECT_EQ(l[1].chunks[0].begin, 4);
  EXPECT_EQ(l[2].tensors, (std::vector<int>{2}));
  // The tensor limit: one tensor per launch.
  const auto one = mt::plan({3, 3, 3}, 4, 1, 160);
  ASSERT_EQ(one.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(one[i].tensors, (std::vector<int>{static_cast<int>(i)}));
  VOLT_EXPECT_ERROR(mt::plan({3}, 0, 1, 1), "multi_tensor::plan", "chunk=0");
}

TEST(MultiTensorOptim, AdamMatchesTheSingleTensorOpBitForBit) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {0}, {33, 65}, {1}};
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    adam_multi_matches_single(shapes, DType::f32, DType::f32, d, AdamHyper{.lr = 0.05});
    adam_multi_matches_single(shapes, DType::f64, DType::f64, d,
                              AdamHyper{.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
    adam_multi_matches_single(shapes, DType::f32, DType::f32, d,
                              AdamHyper{.lr = 0.05, .weight_decay = 0.1, .decoupled_weight_decay = true});
    adam_multi_matches_single(shapes, DType::bf16, DType::f32, d, AdamHyper{.lr = 0.05});
    adam_multi_matches_single(shapes, DType::f16, DType::f16, d, AdamHyper{.lr = 0.01, .amsgrad = true});
  }
}

TEST(MultiTensorOptim, SgdMatchesTheSingleTensorOpBitForBit) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {33, 65}};
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    sgd_multi_matches_single(shapes, DType::f32, d, SgdHyper{.lr = 0.1});
    sgd_multi_matches_single(shapes, DType::f64, d,
                             SgdHyper{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
    sgd_multi_matches_single(shapes, DType::bf16, d, SgdHyper{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  }
}

TEST(MultiTensorOptim, ListsLargerThanOneLaunch) {
  // On a GPU: 30 tensors (more than one argument block names), one tensor of more chunks than a block holds (which
  // now has a launch of its own, being above 2^20 elements), and 12 tensors just below 2^20 elements whose chunks
  // (16 each) fill more than one launch's 160. On the CPU the same lists run through the loop.
  std::vector<Shape> many(30, Shape{1000});
  many.push_back({65536 * 161 + 5});
  for (int i = 0; i < 12; ++i) many.push_back({(int64_t(1) << 20) - 1});
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    adam_multi_matches_single(many, DType::f32, DType::f32, d, AdamHyper{.lr = 0.01});
  }
}

TEST(MultiTensorOptim, ChecksTheList) {
  auto entry = [](Shape s, DType dt, DType state) {
    Tensor p = zeros(s, dt);
    return AdamTensors{p, zeros(s, dt), zeros(s, state), zeros(s, state), Tensor()};
  };
  AdamHyper h;
  VOLT_EXPECT_ERROR(adam_step_multi_({entry({2}, DType::f32, DType::f32), entry({3}, DType::f64, DType::f64)}, h),
                    "adam_step_multi_", "entry 1 is float64", "one dtype and device");
  VOLT_EXPECT_ERROR(adam_step_multi_({entry({2}, DType::bf16, DType::f32), entry({3}, DType::bf16, DType::bf16)}, h),
                    "adam_step_multi_", "entry 1 keeps its state in bfloat16", "entry 0 in float32");
  AdamTensors a = entry({4}, DType::f32, DType::f32);
  AdamTensors alias = entry({4}, DType::f32, DType::f32);
  alias.param = a.param;
  VOLT_EXPECT_ERROR(adam_step_multi_({a, alias}, h), "entry 1 updates the same parameter memory");
  AdamTensors bad = entry({4}, DType::f32, DType::f32);
  bad.grad = zeros({5});
  VOLT_EXPECT_ERROR(adam_step_multi_({a, bad}, h), "adam_step_multi_", "grad is (5,)");
  h.step = 0;
  VOLT_EXPECT_ERROR(adam_step_multi_({a}, h), "step must be >= 1");
  adam_step_multi_({}, AdamHyper{});  // an empty list does nothing
  SgdTensors s{zeros({2}), zeros({2}), Tensor()};
  VOLT_EXPECT_ERROR(sgd_step_multi_({s, SgdTensors{zeros({2}), zeros({2}), zeros({2})}}, SgdHyper{}),
                    "sgd_step_multi_", "entry 1 keeps its state in float32", "entry 0 in nothing");
}

TEST(MultiTensorOptim, OptimizerGroupsMixedParametersIntoSeveralLists) {
  // One group holding f32 and f64 parameters, one of which misses a gradient on the second step (so its step
  // count falls behind): the optimizer splits the group into lists the multi-tensor op accepts and the result
  // equals per-parameter Adam.
  auto run = [](bool reference) {
    std::vector<Tensor> ps = {values({4, 3}, 1, DType::f32, kCPU), values({5}, 2, DType::f64, kCPU),
                              values({6}, 3, DType::f32, kCPU)};
    for (auto& p : ps) p.set_requires_grad(true);
    optim::Adam opt(ps, {.lr = 0.1, .weight_decay = 0.01});
    std::vector<std::vector<Tensor>> states(ps.size());
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < ps.size(); ++i) {
        const bool skip = step == 2 && i == 2;
        ps[i].set_grad(skip ? Tensor() : values(ps[i].shape(), 50 * step + i, ps[i].dtype(), kCPU));
      }
      if (!reference) {
        opt.step();
      } else {
        NoGradGuard ng;
        for (size_t i = 0; i < ps.size(); ++i) {
          if (!ps[i].grad().defined()) continue;
          if (states[i].empty()) states[i] = {zeros(ps[i].shape(), ps[i].dtype()), zeros(ps[i].shape(), ps[i].dtype())};
          const int64_t n = static_cast<int64_t>(step) - (i == 2 && step == 3 ? 1 : 0);
          adam_step_(ps[i], ps[i].grad(), states[i][0], states[i][1], Tensor(),
                     AdamHyper{.lr = 0.1, .weight_decay = 0.01, .step = n});
        }
      }
    }
    return ps;
  };
  auto a = run(false), b = run(true);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << "param " << i;
}

TEST(MultiTensorOptim, UnscaleTakesMixedListsInOnePassPerDtype) {
  // f32 and bf16 gradients, a strided one and an empty one: each is scaled exactly as alone, and the flag says
  // whether any of them held inf/NaN.
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    auto make = [&] {
      return std::vector<Tensor>{values({4, 3}, 1, DType::f32, d), values({70000}, 2, DType::bf16, d),
                                 values({5, 6}, 3, DType::f32, d).t(), zeros({0}, DType::f32, d),
                                 values({9}, 4, DType::bf16, d)};
    };
    std::vector<Tensor> all = make(), alone = make();
    Tensor found = unscale_grads_(all, 0.25);
    EXPECT_EQ(found.item(), 0.0);
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_EQ(unscale_grads_({alone[i]}, 0.25).item(), 0.0);
      EXPECT_TRUE(same_bits(all[i], alone[i])) << "gradient " << i;
      if (all[i].numel() > 0) EXPECT_FALSE(same_bits(all[i], make()[i])) << "gradient " << i << " unchanged";
    }
    std::vector<Tensor> bad = make();
    bad[4].narrow(0, 7, 1).fill_(std::numeric_limits<double>::infinity());
    EXPECT_EQ(unscale_grads_(bad, 0.5).item(), 1.0);
    EXPECT_TRUE(same_bits(bad[0], mul(make()[0], 0.5))) << "the finite gradients are still unscaled";
  }
}

TEST(MultiTensorOptim, NormOverMixedListsMatchesADoubleReference) {
  // f32, bf16 and f64 tensors, a strided one, an empty one and one spanning several chunks: the norm equals the
  // double-precision reference for p = 1, 2, 3 and infinity; NaN anywhere propagates.
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    std::vector<Tensor> ts = {values({4, 3}, 1, DType::f32, d), values({70000}, 2, DType::bf16, d),
                              values({5, 6}, 3, DType::f64, d).t(), zeros({0}, DType::f32, d),
                              values({200000}, 4, DType::f32, d, -3, 3)};
    for (double p : {1.0, 2.0, 3.0, static_cast<double>(INFINITY)}) {
      double ref = 0.0;
      for (const Tensor& t : ts)
        for (double x : t.to_vector<double>()) ref = std::isinf(p) ? std::max(ref, std::abs(x)) : ref + std::pow(std::abs(x), p);
      if (!std::isinf(p)) ref = std::pow(ref, 1.0 / p);
      const Tensor n = multi_tensor_norm(ts, p);
      EXPECT_EQ(n.dtype(), DType::f64);
      EXPECT_EQ(n.device(), d);
      EXPECT_NEAR(n.item(), ref, 1e-12 * ref) << "p=" << p;
    }
    std::vector<Tensor> nan = ts;
    nan[1] = nan[1].clone();
    nan[1].narrow(0, 65537, 1).fill_(std::nan(""));
    EXPECT_TRUE(std::isnan(multi_tensor_norm(nan, 2.0).item()));
    EXPECT_TRUE(std::isnan(multi_tensor_norm(nan, INFINITY).item()));
  }
}

TEST(MultiTensorOptim, ScaleRoundsTheCoefficientToEachDtype) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    auto make = [&] {
      return std::vector<Tensor>{values({4, 3}, 1, DType::f32, d), values({70000}, 2, DType::bf16, d),
                                 values({5, 6}, 3, DType::f16, d).t(), zeros({0}, DType::f32, d), Tensor()};
    };
    std::vector<Tensor> ts = make(), ref = make();
    const Tensor coef = scalar_tensor(0.3, DType::f64).to(d);
    multi_tensor_scale_(ts, coef);
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].defined()) continue;
      Tensor expected = mul(ref[i], coef.to(ref[i].dtype()));
      EXPECT_TRUE(same_bits(ts[i], expected)) << "tensor " << i << " (" << dtype_name(ts[i].dtype()) << ")";
    }
  }
  VOLT_EXPECT_ERROR(multi_tensor_scale_({zeros({2})}, scalar_tensor(1.0, DType::f32)), "multi_tensor_scale_",
                    "coef must be a 0-d float64");
  VOLT_EXPECT_ERROR(multi_tensor_scale_({zeros({2}, DType::i64)}, scalar_tensor(1.0, DType::f64)),
                    "multi_tensor_scale_", "has dtype int64");
  Tensor p = zeros({2}).set_requires_grad();
  VOLT_EXPECT_ERROR(multi_tensor_scale_({p}, scalar_tensor(1.0, DType::f64)), "requires grad");
}

namespace {

// A tensor of at least 1 << 20 elements gets a CUDA launch of its own over the whole GPU (kernels/cuda/optim.cu);
// smaller ones share the chunked multi-tensor launches. Both do the same arithmetic on each element.
constexpr int64_t kOwnLaunch = int64_t(1) << 20;

// Scales `whole` as one tensor and a copy of it as pieces below the own-launch size (narrowed views of one
// storage); both must give mul(x, coef rounded to the dtype) bit for bit.
void scale_whole_vs_pieces(int64_t n, DType dt, Device d, double c) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n) + " coef=" + std::to_string(c));
  Tensor whole = values({n}, 7, dt, d, -3, 3), split = whole.clone(), ref = whole.clone();
  std::vector<Tensor> pieces;
  const int64_t piece = kOwnLaunch / 3;
  for (int64_t b = 0; b < n; b += piece) pieces.push_back(split.narrow(0, b, std::min(piece, n - b)));
  const Tensor coef = scalar_tensor(c, DType::f64).to(d);
  multi_tensor_scale_({whole, values({100}, 8, dt, d)}, coef);
  multi_tensor_scale_(pieces, coef);
  EXPECT_TRUE(same_bits(whole, split)) << "one launch of its own vs multi-tensor chunks";
  EXPECT_TRUE(same_bits(whole, mul(ref, coef.to(dt)))) << "vs mul by the rounded coefficient";
}

}  // namespace

TEST(MultiTensorOptim, ScaleOfATensorAboveTheOwnLaunchSizeMatchesPieces) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    for (DType dt : {DType::f32, DType::bf16}) scale_whole_vs_pieces(kOwnLaunch + 12345, dt, d, 0.37);
  }
}

// A coefficient of exactly 1 is skipped (x * 1 == x): the values are unchanged, infinities and -0 included.
TEST(MultiTensorOptim, ScaleByOneLeavesTheValues) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      Tensor x = from_vector<double>({1.5, -0.0, INFINITY, -INFINITY, 3e-5, -7.25}, {6}).to(d, dt);
      Tensor big = values({kOwnLaunch + 1}, 9, dt, d);
      Tensor x0 = x.clone(), big0 = big.clone();
      multi_tensor_scale_({x, big}, scalar_tensor(1.0, DType::f64).to(d));
      EXPECT_TRUE(same_bits(x, x0)) << dtype_name(dt);
      EXPECT_TRUE(same_bits(big, big0)) << dtype_name(dt);
    }
  }
}

// On a GPU: the own-launch path (5M elements, grid-stride over the whole GPU) equals the CPU loop bit for bit.
TEST(MultiTensorOptimCuda, ScaleByFiveMillionElementsMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the own-launch scale_by path runs on a GPU only";
  const Device d = cuda_device(0);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor cpu = values({5'000'000}, 11, dt, kCPU, -4, 4);
    Tensor gpu = cpu.to(d);
    multi_tensor_scale_({cpu}, scalar_tensor(0.731, DType::f64));
    multi_tensor_scale_({gpu}, scalar_tensor(0.731, DType::f64).to(d));
    EXPECT_TRUE(same_bits(gpu, cpu));
  }
  scale_whole_vs_pieces(5'000'000 + 3, DType::f32, d, -1.75);
}

// On a GPU: Adam over a tensor with a launch of its own equals Adam over the same values as multi-tensor pieces.
TEST(MultiTensorOptimCuda, AdamOnATensorWithItsOwnLaunchMatchesPieces) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the own-launch adam path runs on a GPU only";
  const Device d = cuda_device(0);
  const int64_t n = 3 * kOwnLaunch / 2 + 7, piece = kOwnLaunch / 2;
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const AdamHyper h{.lr = 0.01, .weight_decay = 0.1, .decoupled_weight_decay = true};
    Tensor p1 = values({n}, 12, dt, d), p2 = p1.clone();
    Tensor m1 = zeros({n}, DType::f32, d), v1 = zeros({n}, DType::f32, d), m2 = m1.clone(), v2 = v1.clone();
    for (int step = 1; step <= 2; ++step) {
      AdamHyper hs = h;
      hs.step = step;
      Tensor g = values({n}, 50 + step, dt, d, -2, 2);
      adam_step_multi_({AdamTensors{p1, g, m1, v1, Tensor()}}, hs);
      std::vector<AdamTensors> pieces;
      for (int64_t b = 0; b < n; b += piece) {
        const int64_t len = std::min(piece, n - b);
        pieces.push_back({p2.narrow(0, b, len), g.narrow(0, b, len), m2.narrow(0, b, len), v2.narrow(0, b, len),
                          Tensor()});
      }
      adam_step_multi_(pieces, hs);
    }
    EXPECT_TRUE(same_bits(p1, p2)) << "param";
    EXPECT_TRUE(same_bits(m1, m2)) << "exp_avg";
    EXPECT_TRUE(same_bits(v1, v2)) << "exp_avg_sq";
  }
}

// On a GPU: the gradient norm of a list with tensors large enough for launches of their own (a grid fixed by the
// size) and small ones (the chunked plan) equals the CPU's in every norm, to the rounding of sums in double, and is
// the same bit for bit on a second run.
TEST(MultiTensorNormCuda, OwnLaunchesAndChunksMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA gradient norm runs on a GPU only";
  const Device d = cuda_device(0);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<Tensor> cpu = {values({5'000'000}, 21, dt, kCPU, -3, 3), values({1000}, 22, dt, kCPU),
                               values({kOwnLaunch + 5}, 23, dt, kCPU), values({3, 7}, 24, dt, kCPU)};
    std::vector<Tensor> gpu;
    for (const Tensor& t : cpu) gpu.push_back(t.to(d));
    for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
      SCOPED_TRACE(p);
      const double want = multi_tensor_norm(cpu, p).item(), got = multi_tensor_norm(gpu, p).item();
      EXPECT_NEAR(got, want, 1e-12 * want);
      EXPECT_EQ(multi_tensor_norm(gpu, p).item(), got) << "a second run differs";
    }
  }
}
