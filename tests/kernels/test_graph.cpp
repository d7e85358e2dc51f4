// volt::Graph (kernels/graph.h) on the CPU, where a capture records the backend kernel calls: replays follow
// the static inputs, nothing runs during the capture, host reads are refused, and the optimizers and random ops
// stay bit-identical to eager code across replays.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error_message.h"
#include <volt/kernels/graph.h>
#include <volt/kernels/ops.h>
#include <volt/nn/optim.h>

using namespace volt;

// The statement throws, and the message contains `text`.
#define EXPECT_THROW_MSG(stmt, text)                                            \
  do {                                                                          \
    const std::string msg_ = volt::testing::message_of([&] { (void)(stmt); }); \
    EXPECT_NE(msg_.find(text), std::string::npos) << msg_;                     \
  } while (0)

namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// Bit-for-bit equality of two f32 tensors.
void expect_same_bits(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  std::vector<float> x = values(a), y = values(b);
  ASSERT_EQ(x.size(), y.size());
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
}

}  // namespace

TEST(Graph, ReplayFollowsTheStaticInputs) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3});
  Graph g(kCPU);
  g.capture_begin();
  Tensor y = x * 2.0 + 1.0;
  Tensor s = y.sum();
  g.capture_end();
  EXPECT_TRUE(g.captured());
  EXPECT_GE(g.num_nodes(), 3u);
  ASSERT_TRUE(g.replay());
  EXPECT_EQ(values(y), (std::vector<float>{3, 5, 7}));
  EXPECT_FLOAT_EQ(s.item(), 15.0);
  x.copy_(from_vector(std::vector<float>{-1, 0, 10}, {3}));
  ASSERT_TRUE(g.replay());
  EXPECT_EQ(values(y), (std::vector<float>{-1, 1, 21}));
  EXPECT_FLOAT_EQ(s.item(), 21.0);
  EXPECT_EQ(g.replays(), 2);
}

TEST(Graph, NothingRunsDuringTheCapture) {
  Tensor x = from_vector(std::vector<float>{4, 5}, {2});
  Tensor out = zeros({2});
  Graph g(kCPU);
  g.capture_begin();
  out.copy_(x);
  g.capture_end();
  EXPECT_EQ(values(out), (std::vector<float>{0, 0}));  // recorded, not run
  g.replay();
  EXPECT_EQ(values(out), (std::vector<float>{4, 5}));
}

TEST(Graph, ZerosAreRecordedSoEveryReplayStartsFromZero) {
  Tensor x = from_vector(std::vector<float>{1, 2}, {2});
  Graph g(kCPU);
  g.capture_begin();
  Tensor acc = zeros({2});
  add_(acc, x);
  g.capture_end();
  g.replay();
  g.replay();
  EXPECT_EQ(values(acc), (std::vector<float>{1, 2}));  // not 2x: the zero fill is replayed too
}

TEST(Graph, HostReadsDuringTheCaptureAreErrors) {
  Tensor x = ones({2});
  Graph g(kCPU);
  g.capture_begin();
  Tensor s = x.sum();
  EXPECT_THROW_MSG(s.item(), "item() while a Graph captures cpu's work");
  EXPECT_THROW_MSG(s.to_vector<float>(), "to_vector() while a Graph captures");
  g.capture_abort();
  EXPECT_FALSE(g.captured());
  EXPECT_EQ(Graph::capturing(kCPU), nullptr);
  EXPECT_FLOAT_EQ(x.sum().item(), 2.0);  // eager again after the abort
}

TEST(Graph, MisuseIsReported) {
  Graph g(kCPU);
  EXPECT_THROW_MSG(g.replay(), "nothing captured");
  EXPECT_THROW_MSG(g.capture_end(), "not capturing on this thread");
  g.capture_begin();
  Graph other(kCPU);
  EXPECT_THROW_MSG(other.capture_begin(), "one capture per thread at a time");
  EXPECT_THROW_MSG(g.capture_begin(), "is capturing already");
  g.capture_end();
  EXPECT_THROW_MSG(g.capture_begin(), "captured already");
  EXPECT_THROW_MSG(g.dynamic(8, [](void*) {}), "only while this graph captures");
}

TEST(Graph, DynamicBlocksAreRefreshedBeforeEachReplayAndMayRefuseIt) {
  Graph g(kCPU);
  g.capture_begin();
  int refreshes = 0;
  bool allow = true;
  auto* block = static_cast<double*>(g.dynamic(
      sizeof(double), [&](void* host) { *static_cast<double*>(host) += 1.0; ++refreshes; }, [&] { return allow; }));
  g.capture_end();
  EXPECT_TRUE(g.replay());
  EXPECT_TRUE(g.replay());
  EXPECT_EQ(*block, 2.0);  // the previous content is handed back to the refresh
  allow = false;
  EXPECT_FALSE(g.replay());
  EXPECT_EQ(refreshes, 2);  // a refused replay refreshes nothing
  EXPECT_EQ(g.replays(), 2);
}

TEST(Graph, RandomOpsDrawFreshNumbersPerReplayExactlyAsEager) {
  Tensor x = ones({64});
  const uint64_t seed = 1234;
  Generator eager_gen(seed);
  std::vector<Tensor> eager;
  for (int i = 0; i < 3; ++i) {
    eager.push_back(dropout(x, 0.5, true, &eager_gen));
    eager.push_back(rand({5}, DType::f32, kCPU, &eager_gen));
    eager.push_back(randn({7}, DType::f32, kCPU, &eager_gen));
  }
  Generator gen(seed);
  Graph g(kCPU);
  g.capture_begin();
  Tensor d = dropout(x, 0.5, true, &gen);
  Tensor u = rand({5}, DType::f32, kCPU, &gen);
  Tensor n = randn({7}, DType::f32, kCPU, &gen);
  g.capture_end();
  EXPECT_EQ(gen.offset(), 0u);  // the capture draws nothing; each replay draws the whole step's counters
  for (int i = 0; i < 3; ++i) {
    g.replay();
    expect_same_bits(d, eager[3 * i]);
    expect_same_bits(u, eager[3 * i + 1]);
    expect_same_bits(n, eager[3 * i + 2]);
  }
  EXPECT_EQ(gen.offset(), eager_gen.offset());
  // A reseed between replays is seen by the next one, as by eager code.
  gen.manual_seed(99);
  Generator again(99);
  g.replay();
  expect_same_bits(d, dropout(x, 0.5, true, &again));
}

namespace {

// One training step of a least-squares fit: loss, backward, optimizer step, zero_grad.
struct Fit {
  Tensor w = zeros({4, 1});
  Tensor x = empty({8, 4});
  Tensor y = empty({8, 1});
  std::unique_ptr<optim::Optimizer> opt;
  Fit() { w.set_requires_grad(true); }
  void step() {
    Tensor loss = mse_loss(matmul(x, w), y);
    loss.backward();
    opt->step();
    opt->zero_grad();
  }
  void load(int k) {
    x.copy_(randn_with_seed({8, 4}, 10 + k, 0));
    y.copy_(randn_with_seed({8, 1}, 50 + k, 0));
  }
};

// One eager step (which creates the optimizer state), then the next step captured and replayed once.
std::unique_ptr<Graph> capture_second_step(Fit& f) {
  f.load(0);
  f.step();
  auto g = std::make_unique<Graph>(kCPU);
  g->capture_begin();
  f.step();
  g->capture_end();
  EXPECT_TRUE(g->replay());
  return g;
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(Tensor)>;

// Eager steps 0..5 against: step 0 eager, step 1 captured, steps 1..5 replays; the learning rate changes before
// step 3. The parameters and the step counts must agree bit for bit.
void check_captured_optimizer(const MakeOpt& make) {
  Fit eager, graphed;
  eager.opt = make(eager.w);
  graphed.opt = make(graphed.w);
  for (int k = 0; k < 6; ++k) {
    if (k == 3) eager.opt->param_groups()[0].lr *= 0.5;
    eager.load(k);
    eager.step();
  }
  Graph g(kCPU);
  graphed.load(0);
  graphed.step();  // creates the optimizer state
  g.capture_begin();
  graphed.step();
  g.capture_end();
  EXPECT_EQ(graphed.opt->step_count(0, 0), 1);  // a captured step counts at its replays
  for (int k = 1; k < 6; ++k) {
    if (k == 3) graphed.opt->param_groups()[0].lr *= 0.5;
    graphed.load(k);
    ASSERT_TRUE(g.replay());
  }
  expect_same_bits(graphed.w.detach(), eager.w.detach());
  EXPECT_EQ(graphed.opt->step_count(0, 0), 6);
  EXPECT_EQ(graphed.opt->step_count(0, 0), eager.opt->step_count(0, 0));
}

}  // namespace

TEST(GraphOptimizers, AdamMatchesEagerAcrossReplaysAndLrChanges) {
  check_captured_optimizer([](Tensor w) { return std::make_unique<optim::Adam>(std::vector<Tensor>{w}, optim::AdamOptions{.lr = 0.1}); });
}

TEST(GraphOptimizers, AdamWWithAmsgradMatchesEager) {
  check_captured_optimizer([](Tensor w) {
    return std::make_unique<optim::AdamW>(std::vector<Tensor>{w},
                                          optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
  });
}

TEST(GraphOptimizers, SgdWithNesterovMomentumMatchesEager) {
  check_captured_optimizer([](Tensor w) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{w},
                                        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  });
}

TEST(GraphOptimizers, CaptureNeedsTheStateOfAnEagerStep) {
  Fit f;
  f.opt = std::make_unique<optim::Adam>(std::vector<Tensor>{f.w}, optim::AdamOptions{.lr = 0.1});
  f.load(0);
  Graph g(kCPU);
  g.capture_begin();
  EXPECT_THROW_MSG(f.step(), "take one eager step before capturing");
  g.capture_abort();
}

TEST(GraphOptimizers, AChangedSpecialisationRefusesTheReplay) {
  Fit f;
  f.opt = std::make_unique<optim::Adam>(std::vector<Tensor>{f.w}, optim::AdamOptions{.lr = 0.1});
  auto g = capture_second_step(f);
  const std::vector<float> before = values(f.w.detach());
  f.opt->param_groups()[0].options.weight_decay = 0.1;  // the kernels were specialised on weight_decay == 0
  EXPECT_FALSE(g->replay());
  EXPECT_EQ(values(f.w.detach()), before);
  EXPECT_EQ(f.opt->step_count(0, 0), 2);  // not counted
}

TEST(GraphOptimizers, ReplacedStateOrFrozenParametersRefuseTheReplay) {
  Fit f;
  f.opt = std::make_unique<optim::Adam>(std::vector<Tensor>{f.w}, optim::AdamOptions{.lr = 0.1});
  auto g = capture_second_step(f);
  // New state tensors (a restore): the graph would write into the old, freed ones.
  f.opt->load_state_dict(f.opt->state_dict());
  EXPECT_FALSE(g->replay());
  EXPECT_EQ(f.opt->step_count(0, 0), 2);
  // A frozen parameter: the graph would still update it.
  Fit h;
  h.opt = std::make_unique<optim::SGD>(std::vector<Tensor>{h.w}, optim::SGDOptions{.lr = 0.1});
  auto g2 = capture_second_step(h);
  h.w.set_requires_grad(false);
  EXPECT_FALSE(g2->replay());
  h.w.set_requires_grad(true);
  EXPECT_TRUE(g2->replay());
}

namespace {

// Two parameters in one multi-tensor batch: a step in which both or only w1 get a gradient, then one eager step
// (both) and the next captured and replayed once; `make` builds the optimizer.
struct TwoParams {
  Tensor w1 = zeros({4, 1}).set_requires_grad(), w2 = zeros({4, 1}).set_requires_grad();
  Tensor x = randn_with_seed({8, 4}, 1, 0);
  std::unique_ptr<optim::Optimizer> opt;
  Graph graph{kCPU};
  explicit TwoParams(const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make)
      : opt(make({w1, w2})) {
    step(true);  // creates both parameters' state
    graph.capture_begin();
    step(true);
    graph.capture_end();
    EXPECT_TRUE(graph.replay());
  }
  void step(bool both) {
    Tensor out = matmul(x, add(w1, 1.0));
    if (both) out = add(out, matmul(x, w2));
    sum(mul(out, out)).backward();
    opt->step();
    opt->zero_grad();
  }
};

}  // namespace

// A captured update has one step count per multi-tensor batch: when an eager step in between updated only some of a
// batch's parameters (the others had no gradient), their counts differ and the replay is refused, where it would
// have given all of them one count (bias corrections, rounding counters).
TEST(GraphOptimizers, DivergedStepCountsInABatchRefuseTheReplay) {
  TwoParams t([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 0.1});
  });
  EXPECT_EQ(t.opt->step_count(0, 0), 2);
  EXPECT_EQ(t.opt->step_count(0, 1), 2);
  t.step(false);  // eager, and only w1 has a gradient
  EXPECT_EQ(t.opt->step_count(0, 0), 3);
  EXPECT_EQ(t.opt->step_count(0, 1), 2);
  EXPECT_FALSE(t.graph.replay());
  EXPECT_EQ(t.opt->step_count(0, 0), 3);  // a refused replay counts nothing
}

// SGD's kernels read no step count, so its batches need not share one: the same divergence replays.
TEST(GraphOptimizers, SgdReplaysWhateverTheStepCounts) {
  TwoParams t([](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  });
  t.step(false);
  EXPECT_NE(t.opt->step_count(0, 0), t.opt->step_count(0, 1));
  EXPECT_TRUE(t.graph.replay());
}
