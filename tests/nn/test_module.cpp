// Module mechanics: registration order and dotted names, to(), train/eval, zero_grad, state_dict.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/nn/nn.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_close;

namespace {

// A leaf with a parameter and a float + an integer buffer, built from elementwise ops only.
struct Scale : nn::UnaryModule {
  Tensor w, stat, count;
  explicit Scale(int64_t n) {
    w = register_parameter("w", full({n}, 2.0));
    stat = register_buffer("stat", full({n}, 0.5));
    count = register_buffer("count", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) override { return x * w; }
  std::string type_name() const override { return "Scale"; }
};

struct Net : nn::UnaryModule {
  Tensor bias;
  Scale a{3};
  std::shared_ptr<Scale> b;
  Net() {
    bias = register_parameter("bias", zeros({3}));
    register_module("a", a);
    b = register_module("b", std::make_shared<Scale>(3));
  }
  Tensor forward(const Tensor& x) override { return (*b)(a(x)) + bias; }
};

std::vector<std::string> names(const nn::StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [n, t] : sd) out.push_back(n);
  return out;
}

}  // namespace

TEST(Module, NamedParametersDottedRegistrationOrder) {
  Net net;
  EXPECT_EQ(names(net.named_parameters()), (std::vector<std::string>{"bias", "a.w", "b.w"}));
  EXPECT_EQ(names(net.named_parameters(false)), (std::vector<std::string>{"bias"}));
  EXPECT_EQ(names(net.named_buffers()), (std::vector<std::string>{"a.stat", "a.count", "b.stat", "b.count"}));
  EXPECT_EQ(names(net.state_dict()),
            (std::vector<std::string>{"bias", "a.w", "a.stat", "a.count", "b.w", "b.stat", "b.count"}));
  auto mods = net.named_modules();
  ASSERT_EQ(mods.size(), 3u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[1].first, "a");
  EXPECT_EQ(mods[2].first, "b");
  EXPECT_EQ(mods[1].second, &net.a);
  EXPECT_EQ(net.num_parameters(), 9);
  EXPECT_TRUE(net.parameters()[1].is_same(net.a.w));
  EXPECT_TRUE(net.a.w.requires_grad());
  EXPECT_FALSE(net.a.stat.requires_grad());
}

TEST(Module, SharedParameterListedOnce) {
  struct Tied : nn::Module {
    Scale a{2}, b{2};
    Tied() {
      register_module("a", a);
      register_module("b", b);
    }
  } m;
  m.b.register_parameter("tied", m.a.w);
  EXPECT_EQ(names(m.named_parameters()), (std::vector<std::string>{"a.w", "b.w"}));
  EXPECT_EQ(m.num_parameters(), 4);
}

TEST(Module, RegistrationErrors) {
  Scale s(2);
  VOLT_EXPECT_ERROR(s.register_parameter("w", zeros({1})), "'w'", "already registered");
  VOLT_EXPECT_ERROR(s.register_buffer("x.y", zeros({1})), "x.y", "'.'");
  VOLT_EXPECT_ERROR(s.register_parameter("idx", zeros({1}, DType::i64)), "idx", "int64", "floating");
  VOLT_EXPECT_ERROR(s.register_module("self", s), "own child");
}

TEST(Module, ToDTypeKeepsMemberTensorsValid) {
  Net net;
  Tensor handle = net.a.w;  // an outside copy, like an optimizer's
  net.a.w.set_grad(full({3}, 1.0));
  net.to(DType::f64);
  EXPECT_EQ(net.a.w.dtype(), DType::f64);
  EXPECT_EQ(handle.dtype(), DType::f64);
  EXPECT_TRUE(handle.is_same(net.named_parameters()[1].second));
  EXPECT_EQ(net.a.stat.dtype(), DType::f64);        // floating buffer follows
  EXPECT_EQ(net.a.count.dtype(), DType::i64);       // integer buffer does not
  EXPECT_EQ(net.a.w.grad().dtype(), DType::f64);    // gradient follows
  EXPECT_TRUE(net.a.w.requires_grad());
  expect_close(handle, {2, 2, 2});
  // The module still computes and backpropagates in f64 through its members.
  Tensor y = net(from_vector<double>({1, 2, 3}, {3}));
  EXPECT_EQ(y.dtype(), DType::f64);
  expect_close(y, {4, 8, 12});
  net.zero_grad();
  y.sum().backward();
  expect_close(net.a.w.grad(), {2, 4, 6});
  VOLT_EXPECT_ERROR(net.to(DType::i32), "floating");
}

TEST(Module, ToDeviceMovesBuffersAndRejectsMissingDevice) {
  Net net;
  net.to(kCPU);  // no-op, handles stay the same
  EXPECT_EQ(net.a.stat.device(), kCPU);
  if (!cuda_available()) {
    EXPECT_THROW(net.to(cuda_device(0)), Error);
    EXPECT_EQ(net.a.w.device(), kCPU);
    EXPECT_EQ(net.b->stat.device(), kCPU);
  } else {
    Tensor handle = net.b->stat;
    net.to(cuda_device(0));
    EXPECT_TRUE(handle.is_cuda());
    EXPECT_TRUE(net.b->count.is_cuda());
    EXPECT_TRUE(net.a.w.is_cuda());
    net.to(kCPU);
    expect_close(handle, {0.5, 0.5, 0.5});
  }
}

TEST(Module, TrainEvalPropagates) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.a.is_training());
  EXPECT_FALSE(net.b->is_training());
  net.train();
  EXPECT_TRUE(net.b->is_training());
}

TEST(Module, ZeroGradToNoneAndToZero) {
  Net net;
  net(ones({3})).sum().backward();
  ASSERT_TRUE(net.a.w.grad().defined());
  net.zero_grad(false);
  expect_close(net.a.w.grad(), {0, 0, 0});
  net.zero_grad();
  EXPECT_FALSE(net.a.w.grad().defined());
  EXPECT_FALSE(net.bias.grad().defined());
}

TEST(Module, StateDictRoundTrip) {
  Net src, dst;
  {
    NoGradGuard ng;
    src.a.w.copy_(from_vector<float>({1, 2, 3}));
    src.b->stat.copy_(from_vector<float>({7, 8, 9}));
    src.a.count.fill_(5);
  }
  Tensor dst_w = dst.a.w;
  dst.load_state_dict(src.state_dict());
  expect_close(dst_w, {1, 2, 3});
  expect_close(dst.b->stat, {7, 8, 9});
  EXPECT_EQ(dst.a.count.item<int64_t>(), 5);
  EXPECT_TRUE(dst_w.is_same(dst.a.w));
  // Loading copies: changing the source afterwards does not affect the destination.
  {
    NoGradGuard ng;
    src.a.w.fill_(0);
  }
  expect_close(dst.a.w, {1, 2, 3});
}

TEST(Module, LoadStateDictNamesBadKeys) {
  Net net;
  nn::StateDict sd = net.state_dict();
  sd.erase(sd.begin() + 1);                            // drop a.w
  sd.emplace_back("c.w", zeros({3}));                  // unexpected
  sd[0].second = zeros({4});                           // bias mis-shaped
  Tensor before = net.b->w.clone();
  VOLT_EXPECT_ERROR(net.load_state_dict(sd), "missing keys: a.w", "unexpected keys: c.w",
                    "bias (expected (3,), got (4,))");
  expect_close(net.b->w, before.to_vector<double>());  // nothing was copied
  // Non-strict tolerates missing/unexpected keys but never a shape mismatch.
  VOLT_EXPECT_ERROR(net.load_state_dict(sd, false), "size mismatch", "bias");
  sd[0].second = full({3}, 4.0);
  net.load_state_dict(sd, false);
  expect_close(net.bias, {4, 4, 4});
}

TEST(Module, SequentialNamesChildrenByIndex) {
  nn::Sequential seq{std::make_shared<Scale>(2), std::make_shared<nn::ReLU>()};
  seq.push_back(std::make_shared<Scale>(2));
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(names(seq.named_parameters()), (std::vector<std::string>{"0.w", "2.w"}));
  expect_close(seq(from_vector<float>({1, -1})), {4, 0});
  EXPECT_EQ(seq[1].type_name(), "ReLU");
  EXPECT_NE(seq.repr().find("(1): ReLU()"), std::string::npos) << seq.repr();
}

namespace {
struct CountingHook : nn::CallHook {
  std::vector<std::string> events;
  void before_call(nn::Module& m) override { events.push_back("before " + m.path_name()); }
  void after_call(nn::Module& m) override { events.push_back("after " + m.path_name()); }
};
struct Throwing : nn::UnaryModule {
  Tensor forward(const Tensor&) override { VOLT_FAIL("forward failed on purpose"); }
};
}  // namespace

// The call hook runs around each call of the module it is installed on (not its children), skips after_call
// when the call throws, and one module takes one hook.
TEST(Module, CallHookRunsAroundEachCall) {
  Net net;
  CountingHook hook, other;
  net.b->set_call_hook(&hook);
  net(ones({3}));
  net(ones({3}));
  EXPECT_EQ(hook.events, (std::vector<std::string>{"before b", "after b", "before b", "after b"}));
  EXPECT_EQ(net.b->call_hook(), &hook);
  VOLT_EXPECT_ERROR(net.b->set_call_hook(&other), "already has a call hook");
  net.b->set_call_hook(nullptr);
  net(ones({3}));
  EXPECT_EQ(hook.events.size(), 4u);
  Throwing t;
  t.set_call_hook(&hook);
  hook.events.clear();
  EXPECT_THROW(t(ones({1})), Error);
  EXPECT_EQ(hook.events, (std::vector<std::string>{"before "}));
}
