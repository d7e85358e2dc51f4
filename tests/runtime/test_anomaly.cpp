// Anomaly detection: the first op whose forward output or backward gradient holds NaN/Inf is reported with its
// name, the module scope that called it and its input shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>

using namespace volt;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Anomaly, OffByDefaultAndGuardRestores) {
  EXPECT_FALSE(autograd::anomaly_enabled());
  {
    DetectAnomalyGuard g;
    EXPECT_TRUE(autograd::anomaly_enabled());
    {
      DetectAnomalyGuard off(false);
      EXPECT_FALSE(autograd::anomaly_enabled());
    }
    EXPECT_TRUE(autograd::anomaly_enabled());
  }
  EXPECT_FALSE(autograd::anomaly_enabled());
}

TEST(Anomaly, ForwardNaNNamesTheOpAndShapes) {
  Tensor x = from_vector<float>({-1.f, 4.f, 9.f}, {3});
  x.set_requires_grad(true);
  // Without detection the NaN just flows.
  EXPECT_TRUE(std::isnan(log(x).to_vector<float>()[0]));
  DetectAnomalyGuard g;
  std::string msg = error_of([&] { (void)log(x); });
  EXPECT_NE(msg.find("detect_anomaly"), std::string::npos) << msg;
  EXPECT_NE(msg.find("forward of Log"), std::string::npos) << msg;
  EXPECT_NE(msg.find(shape_to_string({3})), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside any module"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inputs are all finite"), std::string::npos) << msg;
  // Finite results pass untouched.
  Tensor ok = from_vector<float>({1.f, 4.f, 9.f}, {3});
  ok.set_requires_grad(true);
  EXPECT_EQ(log(ok).to_vector<float>()[0], 0.f);
}

TEST(Anomaly, ForwardInfInsideAModuleNamesTheModule) {
  struct Net : nn::Module {
    nn::Linear l1{2, 2};
    Net() { register_module("l1", l1); }
  } net;
  {
    NoGradGuard ng;
    net.l1.weight.fill_(std::numeric_limits<float>::max());
  }
  Tensor x = from_vector<float>({10.f, 10.f}, {1, 2});
  DetectAnomalyGuard g;
  std::string msg = error_of([&] { (void)net.l1(x); });
  EXPECT_NE(msg.find("in module l1 (Linear)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(shape_to_string({1, 2})), std::string::npos) << msg;
}

TEST(Anomaly, BackwardNaNNamesTheBackwardNodeAndScope) {
  // sqrt(0) is finite forward but its derivative 1/(2*sqrt(0)) is Inf; times 0 gives NaN downstream.
  struct Net : nn::UnaryModule {
    std::string type_name() const override { return "SqrtNet"; }
    Tensor forward(const Tensor& x) override { return sqrt(x); }
  };
  struct Outer : nn::Module {
    Net inner;
    Outer() { register_module("inner", inner); }
  } outer;
  Tensor x = from_vector<float>({0.f, 4.f}, {2});
  x.set_requires_grad(true);
  DetectAnomalyGuard g;
  Tensor y = outer.inner(x);
  std::string msg = error_of([&] { y.sum().backward(); });
  EXPECT_NE(msg.find("SqrtBackward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in module inner (SqrtNet)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gradient for input 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("incoming gradient is finite"), std::string::npos) << msg;
}

TEST(Anomaly, DottedPathOfNestedModules) {
  struct Leaf : nn::UnaryModule {
    Tensor forward(const Tensor& x) override { return x; }
  };
  struct Mid : nn::Module {
    Leaf leaf;
    Mid() { register_module("leaf", leaf); }
  };
  struct Top : nn::Module {
    Mid mid;
    Top() { register_module("mid", mid); }
  } top;
  EXPECT_EQ(top.mid.leaf.path_name(), "mid.leaf");
  EXPECT_EQ(top.path_name(), "");
  DetectAnomalyGuard g;
  std::string seen;
  struct Probe : nn::UnaryModule {
    std::string* out;
    explicit Probe(std::string* o) : out(o) {}
    std::string type_name() const override { return "Probe"; }
    Tensor forward(const Tensor& x) override {
      *out = autograd::current_scope();
      return x;
    }
  } probe(&seen);
  probe(zeros({1}));
  EXPECT_EQ(seen, "<root> (Probe)");
  EXPECT_EQ(autograd::current_scope(), "");
}
