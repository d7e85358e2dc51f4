// The autograd engine's contracts: accumulation, retain_graph, freed graphs, no_grad, detach, propagation of
// requires_grad, grad-ready hooks, and in-place safety.
#include <gtest/gtest.h>

#include <map>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>

using namespace volt;

TEST(AutogradEngine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = from_vector<double>({1, 2, 3}).set_requires_grad();
  (x * x).sum().backward();  // 2x
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));
  (x * 3.0).sum().backward();  // + 3
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
  x.set_grad(Tensor());  // zero_grad(set_to_none)
  EXPECT_FALSE(x.grad().defined());
  (x * 3.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3, 3}));
}

TEST(AutogradEngine, RetainGraphAllowsASecondBackward) {
  Tensor x = from_vector<double>({2}).set_requires_grad();
  Tensor y = (x * x * x).sum();  // dy/dx = 3x^2 = 12
  y.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(x.grad().item(), 12.0);
  y.backward();
  EXPECT_EQ(x.grad().item(), 24.0);
}

TEST(AutogradEngine, SecondBackwardWithoutRetainGraphThrowsClearly) {
  Tensor x = from_vector<double>({2}).set_requires_grad();
  Tensor y = (x.exp() * x).sum();
  y.backward();
  VOLT_EXPECT_ERROR(y.backward(), "already freed", "retain_graph");
}

TEST(AutogradEngine, ExplicitGradientAndShapeChecks) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y = x * 2.0;
  VOLT_EXPECT_ERROR(y.backward(), "backward", "one-element", "(2,)");
  VOLT_EXPECT_ERROR(y.backward(from_vector<double>({1, 1, 1})), "backward", "(3,)", "(2,)");
  y.backward(from_vector<double>({10, 100}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{20, 200}));
  VOLT_EXPECT_ERROR(from_vector<double>({1}).backward(), "backward", "does not require grad");
}

TEST(AutogradEngine, NoGradRecordsNothing) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y;
  {
    NoGradGuard ng;
    EXPECT_FALSE(autograd::grad_enabled());
    y = x * 2.0;
    {
      EnableGradGuard eg;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(autograd::grad_enabled());
  }
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_FALSE(y.grad_fn());
}

TEST(AutogradEngine, DetachSharesStorageAndCutsHistory) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y = x * 3.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.storage().get(), y.storage().get());
  // Gradient stops at the detached value: only the direct x term contributes.
  (d * x).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 6}));
}

TEST(AutogradEngine, RequiresGradPropagation) {
  Tensor a = from_vector<double>({1, 2}).set_requires_grad();
  Tensor b = from_vector<double>({3, 4});
  EXPECT_FALSE((b * 2.0).requires_grad());
  Tensor c = a + b;
  EXPECT_TRUE(c.requires_grad());
  EXPECT_FALSE(c.is_leaf());
  ASSERT_TRUE(c.grad_fn());
  EXPECT_EQ(c.grad_fn()->name(), "AddBackward");
  EXPECT_TRUE(c.view({2, 1}).requires_grad());
  EXPECT_FALSE(lt(a, b).requires_grad());  // comparisons are not differentiable
  c.sum().backward();
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(c.grad().defined());  // only leaves keep .grad
  VOLT_EXPECT_ERROR(from_vector<int64_t>({1}).set_requires_grad(), "set_requires_grad", "floating");
  VOLT_EXPECT_ERROR(c.set_requires_grad(false), "set_requires_grad", "leaf");
}

TEST(AutogradEngine, GradReadyHookFiresOncePerBackwardAfterFullAccumulation) {
  Tensor w = from_vector<double>({1, 2}).set_requires_grad();
  Tensor other = from_vector<double>({5}).set_requires_grad();
  std::vector<std::vector<double>> seen;
  int calls_other = 0;
  int h = w.register_grad_ready_hook([&](const Tensor& p) {
    EXPECT_TRUE(p.is_same(w));
    seen.push_back(p.grad().to_vector<double>());
  });
  other.register_grad_ready_hook([&](const Tensor&) { ++calls_other; });
  // w is used twice (two paths): the hook sees the sum of both contributions, once.
  Tensor loss = (w * 2.0).sum() + (w * w).sum() + other.sum();
  loss.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{4, 6}));  // 2 + 2w
  EXPECT_EQ(calls_other, 1);
  // Second backward: fires again, after accumulating into the existing grad.
  ((w * 10.0).sum() + (w * 1.0).sum()).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{15, 17}));
  EXPECT_EQ(calls_other, 1);  // not reached by this graph
  w.remove_grad_ready_hook(h);
  (w * 1.0).sum().backward();
  EXPECT_EQ(seen.size(), 2u);
  VOLT_EXPECT_ERROR((w * 1.0).register_grad_ready_hook([](const Tensor&) {}), "register_grad_ready_hook", "leaf");
}

TEST(AutogradEngine, InPlaceUpdateOfRequiresGradTensorErrorsUnderGradMode) {
  Tensor w = from_vector<double>({1, 2}).set_requires_grad();
  VOLT_EXPECT_ERROR(w.fill_(0.0), "fill_", "requires grad", "NoGradGuard");
  VOLT_EXPECT_ERROR(w.copy_(from_vector<double>({3, 4})), "copy_", "requires grad");
  VOLT_EXPECT_ERROR(add_(w, from_vector<double>({1, 1})), "requires grad");
  VOLT_EXPECT_ERROR(mul_(w, 2.0), "requires grad");
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 2}));  // untouched
  {
    NoGradGuard ng;  // the optimizer's way
    add_(w, from_vector<double>({1, 1}), -0.5);
    mul_(w, 2.0);
  }
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 3}));
  EXPECT_TRUE(w.requires_grad());
}

TEST(AutogradEngine, MultiPathGraphMatchesFiniteDifferences) {
  Tensor a = volt::testing::rand_f64({3}, 21).set_requires_grad();
  Tensor b = volt::testing::rand_f64({2, 3}, 22).set_requires_grad();
  volt::testing::expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        Tensor s = in[0] * in[1];           // broadcast
        Tensor t = s.exp() + s * in[0];     // a reached by three paths
        return t.t().contiguous() / (in[1].t() + 3.0);
      },
      {a, b});
}

TEST(AutogradEngine, GradReadyHooksFireAsSoonAsALeafIsComplete) {
  // w2 is used by the last op, w1 by the first: w2's gradient is complete before backward reaches w1's op,
  // so its hook must fire before w1's gradient is computed (what lets DDP overlap communication).
  Tensor w1 = from_vector<double>({2.0}).set_requires_grad();
  Tensor w2 = from_vector<double>({3.0}).set_requires_grad();
  std::vector<std::string> order;
  w1.register_grad_ready_hook([&](const Tensor&) { order.push_back("w1"); });
  w2.register_grad_ready_hook([&](const Tensor&) { order.push_back("w2"); });
  Tensor h = w1 * 5.0;
  Tensor marker = h.exp().log();  // more nodes between w1 and the output
  Tensor y = (marker * w2).sum();
  y.backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
  EXPECT_NEAR(w1.grad().item(), 15.0, 1e-12);
  EXPECT_NEAR(w2.grad().item(), 10.0, 1e-12);
}

TEST(AutogradEngine, SharedGradientIsNotAliasedBetweenLeaves) {
  // (a + b).sum(): both leaves receive the same incoming gradient tensor; scaling one must not change the other.
  Tensor a = from_vector<double>({1, 2}).set_requires_grad();
  Tensor b = from_vector<double>({3, 4}).set_requires_grad();
  (a + b).sum().backward();
  Tensor ga = a.grad();
  {
    NoGradGuard ng;
    mul_(ga, 10.0);
  }
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{10, 10}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}

// The pre-node hook sees every node before its formula runs (FSDP re-gathers a unit's parameters there), latest
// created first, and next_sequence_nr() brackets the nodes a stretch of forward code created.
TEST(AutogradEngine, PreNodeHookSeesTheNodesOfAForwardRange) {
  Tensor x = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor y = x * 2.0;
  const uint64_t start = autograd::next_sequence_nr();
  Tensor z = (y * y).exp();  // two nodes inside the range
  const uint64_t end = autograd::next_sequence_nr();
  Tensor loss = z.sum();
  EXPECT_EQ(end - start, 2u);
  std::vector<uint64_t> inside;
  int calls = 0;
  {
    autograd::PreNodeHookGuard hook([&](const Node& n) {
      ++calls;
      if (n.sequence_nr >= start && n.sequence_nr < end) inside.push_back(n.sequence_nr);
    });
    loss.backward();
  }
  EXPECT_EQ(inside, (std::vector<uint64_t>{end - 1, start}));  // exp's node, then mul's
  EXPECT_EQ(calls, 5);  // sum, exp, mul, mul by 2, the leaf's accumulator
  // Out of scope the hook is gone.
  calls = 0;
  (x * 3.0).sum().backward();
  EXPECT_EQ(calls, 0);
}

// A tensor over a storage whose data was released (FSDP between uses) fails clearly when read.
TEST(AutogradEngine, ReleasedStorageReadIsAnError) {
  Tensor t = from_vector<double>({1, 2, 3, 4});
  Tensor v = t.narrow(0, 1, 2);
  t.storage()->data.reset();
  EXPECT_EQ(t.storage()->nbytes, 32u);
  VOLT_EXPECT_ERROR(v.to_vector<double>(), "storage released", "(2,)", "32 bytes");
  Tensor empty_t = empty({0});
  EXPECT_NO_THROW(empty_t.data_ptr());  // no bytes: nothing to release
}
