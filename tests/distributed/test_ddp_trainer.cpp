// The Trainer under DDP on N ranks (mpirun -np 2 / 3, and alone as one rank): every rank asserts.
//  - parity: N ranks with batch B each train to the parameters one process reaches with batch N*B over the
//    same global order (plain loops, no trainer), without and with shuffling and with gradient accumulation;
//  - evaluation over uneven shards: metric objects and sync_dist values equal the single-process values over
//    the whole data, and every sample is evaluated exactly once;
//  - TrainModule::all_gather (equal shapes, uneven first dims, containers, scalars);
//  - a rank_zero_only value monitored by EarlyStopping and ModelCheckpoint, rank-0-only checkpoint writing,
//    and loading that checkpoint into a one-process Trainer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "common/gradcheck.h"
#include <volt/data/data.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/nn/metrics.h>
#include <volt/nn/nn.h>
#include "common/ddp_test_util.h"
#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/trainer.h>

using namespace volt;
namespace fs = std::filesystem;

namespace {

dist::ProcessGroup& pg() { return dist::default_group(); }
int rank() { return pg().rank(); }
int world() { return pg().world_size(); }

using test::ddp_options;

// ---- parity ------------------------------------------------------------------------------------------------

// A two-layer ReLU regressor in f64: pred (B) = relu(x W1 + b1) W2 + b2, loss = MSE.
struct MlpModule : TrainModule {
  Tensor w1, b1, w2, b2;  // (3, 5), (5), (5, 1), (1)
  MlpModule() {
    w1 = register_parameter("w1", cast(rand_with_seed({3, 5}, 21, 0), DType::f64) - 0.5);
    b1 = register_parameter("b1", cast(rand_with_seed({5}, 22, 0), DType::f64) * 0.2);
    w2 = register_parameter("w2", cast(rand_with_seed({5, 1}, 23, 0), DType::f64) - 0.5);
    b2 = register_parameter("b2", zeros({1}, DType::f64));
  }
  std::string type_name() const override { return "MlpModule"; }
  Tensor forward_batch(const Tensor& x) { return matmul(relu(matmul(x, w1) + b1), w2).reshape({-1}) + b2; }
  Tensor loss_of(const Batch& b) { return mse_loss(forward_batch(b.input), b.target); }
  Tensor training_step(const Batch& b, int64_t) override { return loss_of(b); }
  // Collectives issued by each backward (the process group's sequence number before and after).
  std::vector<uint64_t> backward_collectives;
  uint64_t seq_before_ = 0;
  void on_before_backward(const Tensor&) override { seq_before_ = dist::default_group().sequence_number(); }
  void on_after_backward() override {
    backward_collectives.push_back(dist::default_group().sequence_number() - seq_before_);
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.2, .momentum = 0.5}); }
};

std::shared_ptr<data::TensorDataset> regression_data(int64_t n) {
  std::vector<double> xs(n * 3), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 3; ++j) xs[i * 3 + j] = std::sin(0.9 * i + 1.7 * j) + 0.1 * j;
    ys[i] = xs[i * 3] - 2 * xs[i * 3 + 1] + 0.5 * xs[i * 3 + 2] * xs[i * 3 + 2] + 0.3;
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {n, 3}), from_vector(ys, {n}));
}

std::vector<std::vector<double>> params_of(TrainModule& m) {
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p.detach().contiguous().to_vector<double>());
  return out;
}

// One process: global batch k holds positions [k*R*B, (k+1)*R*B) of the epoch's global order (the union of
// rank r's positions r, r+R, ... of that range); steps every `accumulate` batches with the loss divided.
std::vector<std::vector<double>> reference_params(const data::TensorDataset& ds, int64_t epochs, int64_t global_batch,
                                                  bool shuffle, uint64_t seed, int64_t accumulate) {
  MlpModule m;
  optim::SGD opt(m.parameters(), {.lr = 0.2, .momentum = 0.5});
  const int64_t n = ds.size();
  data::DistributedSampler order_of(n, /*num_replicas=*/1, /*rank=*/0, shuffle, seed);
  const int64_t batches = n / global_batch;
  for (int64_t e = 0; e < epochs; ++e) {
    order_of.set_epoch(e);
    std::vector<int64_t> order = order_of.indices();
    for (int64_t k = 0; k < batches; ++k) {
      std::vector<int64_t> idx(order.begin() + k * global_batch, order.begin() + (k + 1) * global_batch);
      Tensor loss = m.loss_of(ds.get_batch(idx));
      (accumulate > 1 ? loss / static_cast<double>(accumulate) : loss).backward();
      if ((k + 1) % accumulate == 0 || k + 1 == batches) {
        opt.step();
        opt.zero_grad();
      }
    }
  }
  return params_of(m);
}

void check_parity(bool shuffle, int64_t accumulate) {
  const int64_t n = 24, per_rank = 2, epochs = 2;  // 24 = 4 * 6: R*B divides n for R = 1, 2, 3
  auto ds = regression_data(n);
  TrainerOptions o = ddp_options();
  o.max_epochs = epochs;
  o.accumulate_grad_batches = accumulate;
  if (shuffle) o.seed = 1234;
  Trainer trainer(o);
  ASSERT_EQ(trainer.strategy().name(), "ddp");
  ASSERT_EQ(trainer.strategy().world_size(), world());
  MlpModule m;
  std::vector<std::vector<double>> init = params_of(m);
  auto loader = std::make_shared<data::DataLoader>(
      ds, data::DataLoaderOptions{.batch_size = per_rank, .shuffle = shuffle, .seed = 99});
  trainer.fit(m, loader);
  const int64_t batches = n / (per_rank * world());
  EXPECT_EQ(trainer.global_step(), epochs * ((batches + accumulate - 1) / accumulate));
  // Gradient sync only on stepping batches: a non-stepping backward issues no collective (no_sync).
  ASSERT_EQ(static_cast<int64_t>(m.backward_collectives.size()), epochs * batches);
  for (int64_t i = 0; i < epochs * batches; ++i) {
    bool steps = ((i % batches) + 1) % accumulate == 0;
    if (!steps) EXPECT_EQ(m.backward_collectives[i], 0u) << "batch " << i << " synced gradients";
    else if (world() > 1) EXPECT_GT(m.backward_collectives[i], 0u) << "batch " << i << " did not sync in backward";
  }

  uint64_t seed = shuffle ? static_cast<uint64_t>(global_seed()) : 0;
  std::vector<std::vector<double>> want = reference_params(*ds, epochs, per_rank * world(), shuffle, seed, accumulate);
  std::vector<std::vector<double>> got = params_of(m);
  ASSERT_EQ(got.size(), want.size());
  double moved = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t j = 0; j < got[i].size(); ++j) {
      EXPECT_NEAR(got[i][j], want[i][j], 1e-10) << "param " << i << "[" << j << "] on rank " << rank();
      moved = std::max(moved, std::abs(got[i][j] - init[i][j]));
    }
  }
  EXPECT_GT(moved, 1e-2) << "training did not change the parameters: the comparison would prove nothing";
}

TEST(DDPTrainer, ParityWithOneProcessSequential) { check_parity(/*shuffle=*/false, /*accumulate=*/1); }
TEST(DDPTrainer, ParityWithOneProcessShuffled) { check_parity(/*shuffle=*/true, /*accumulate=*/1); }
TEST(DDPTrainer, ParityWithOneProcessAccumulated) { check_parity(/*shuffle=*/false, /*accumulate=*/2); }

// Manual optimisation with the seeds' toggle_model(sync_grad) pattern: accumulate 2 batches, sync and step on
// the second. Same parameters as one process; the first batch's backward does no collective.
struct ManualMlpModule : MlpModule {
  ManualMlpModule() { automatic_optimization = false; }
  Tensor training_step(const Batch& b, int64_t batch_idx) override {
    auto opts = optimizers();
    const bool sync = (batch_idx + 1) % 2 == 0 || trainer()->is_last_batch();
    {
      auto toggled = opts[0].toggle_model(/*sync_grad=*/sync);
      manual_backward(loss_of(b) / 2.0);
      if (sync) {
        opts[0].step();
        opts[0].zero_grad();
      }
    }
    return Tensor();
  }
};

TEST(DDPTrainer, ManualOptimizationToggleModelSkipsSyncWhileAccumulating) {
  const int64_t n = 24, per_rank = 2, epochs = 2;
  auto ds = regression_data(n);
  TrainerOptions o = ddp_options();
  o.max_epochs = epochs;
  Trainer trainer(o);
  ManualMlpModule m;
  auto loader = std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = per_rank});
  trainer.fit(m, loader);
  const int64_t batches = n / (per_rank * world());
  EXPECT_EQ(trainer.global_step(), epochs * ((batches + 1) / 2));
  ASSERT_EQ(static_cast<int64_t>(m.backward_collectives.size()), epochs * batches);
  for (int64_t i = 0; i < epochs * batches; ++i) {
    const int64_t k = i % batches;
    const bool sync = (k + 1) % 2 == 0 || k + 1 == batches;
    if (!sync) EXPECT_EQ(m.backward_collectives[i], 0u) << "batch " << i << " synced inside toggle_model(false)";
    else if (world() > 1) EXPECT_GT(m.backward_collectives[i], 0u) << "batch " << i << " did not sync";
  }
  std::vector<std::vector<double>> want = reference_params(*ds, epochs, per_rank * world(), false, 0, 2);
  std::vector<std::vector<double>> got = params_of(m);
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = 0; j < got[i].size(); ++j)
      EXPECT_NEAR(got[i][j], want[i][j], 1e-10) << "param " << i << "[" << j << "] on rank " << rank();
}

// The shuffled order must really differ from the sequential one, or the shuffled parity test above would
// not test the global permutation.
TEST(DDPTrainer, ShuffledReferenceDiffersFromSequential) {
  auto ds = regression_data(24);
  auto a = reference_params(*ds, 2, 2 * world(), false, 0, 1);
  auto b = reference_params(*ds, 2, 2 * world(), true, 1234, 1);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) diff = std::max(diff, std::abs(a[i][j] - b[i][j]));
  EXPECT_GT(diff, 1e-6);
}

// ---- evaluation over uneven shards ---------------------------------------------------------------------------

constexpr int64_t kEvalN = 37;
constexpr int64_t kEvalBatch = 3;  // 37 over 2 ranks: 19/18 -> 7/6 batches; over 3: 13/12/12 -> 5/4/4

// input (N, 5): 3 class logits, a binary score, the sample index. target (N, 2) i64: class, binary label.
std::shared_ptr<data::TensorDataset> eval_data() {
  std::vector<float> xs(kEvalN * 5);
  std::vector<int64_t> ys(kEvalN * 2);
  for (int64_t i = 0; i < kEvalN; ++i) {
    for (int64_t c = 0; c < 3; ++c) xs[i * 5 + c] = static_cast<float>(std::sin(1.3 * i + 2.1 * c));
    xs[i * 5 + 3] = static_cast<float>(0.5 + 0.45 * std::sin(0.77 * i));
    xs[i * 5 + 4] = static_cast<float>(i);
    ys[i * 2] = (i * 7 + i / 3) % 3;
    ys[i * 2 + 1] = (i * 5 % 7) < 3 ? 1 : 0;
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {kEvalN, 5}), from_vector(ys, {kEvalN, 2}));
}

metrics::ClassificationOptions macro3() {
  return {.task = metrics::Task::Multiclass, .num_classes = 3, .average = metrics::Average::Macro};
}

struct MetricSet {
  metrics::F1Score f1{macro3()};
  metrics::Precision precision{macro3()};
  metrics::Recall recall{macro3()};
  metrics::Accuracy accuracy{{.task = metrics::Task::Multiclass, .num_classes = 3}};
  metrics::BinaryAUROC auroc;
  metrics::SumMetric count, index_sum;
  void update(const Batch& b) {
    Tensor logits = b.input.narrow(1, 0, 3).contiguous();
    Tensor cls = b.target.select(1, 0).contiguous();
    f1.update(logits, cls);
    precision.update(logits, cls);
    recall.update(logits, cls);
    accuracy.update(logits, cls);
    auroc.update(b.input.select(1, 3).contiguous(), b.target.select(1, 1).contiguous());
    count.update(ones({b.size()}));
    index_sum.update(b.input.select(1, 4).contiguous());
  }
};

struct EvalModule : TrainModule {
  Tensor dummy;  // DDP setup broadcasts parameters: give it one
  MetricSet m;
  int64_t steps = 0;
  EvalModule() { dummy = register_parameter("dummy", zeros({1})); }
  std::string type_name() const override { return "EvalModule"; }
  void validation_step(const Batch& b, int64_t) override {
    ++steps;
    m.update(b);
    log("f1", m.f1);
    log("precision", m.precision);
    log("recall", m.recall);
    log("acc", m.accuracy);
    log("auroc", m.auroc);
    log("count", m.count);
    log("index_sum", m.index_sum);
    // A per-batch value: its sync_dist epoch value must be the batch-size-weighted global mean.
    log("feat0", b.input.select(1, 0).mean(), {.sync_dist = true});
    // An int8 value summed across ranks and batches: exactly the number of samples.
    log("i8_samples", full({}, static_cast<double>(b.size()), DType::i8), {.reduce_fx = "sum", .sync_dist = true});
  }
};

TEST(DDPTrainer, EvaluationMetricsEqualOneProcessOverUnevenShards) {
  auto ds = eval_data();
  // Single-process values over the whole data, computed directly.
  MetricSet ref;
  std::vector<int64_t> all(kEvalN);
  std::iota(all.begin(), all.end(), 0);
  ref.update(ds->get_batch(all));
  double feat0 = 0;
  for (int64_t i = 0; i < kEvalN; ++i) feat0 += static_cast<float>(std::sin(1.3 * i));
  feat0 /= kEvalN;

  Trainer trainer(ddp_options());
  EvalModule mod;
  auto loader = std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = kEvalBatch});
  std::vector<MetricMap> res = trainer.validate(mod, loader);
  ASSERT_EQ(res.size(), 1u);
  MetricMap r = res[0];

  // Batch counts really differ per rank with 3 ranks (the case a naive per-step collective would hang on).
  const int64_t shard = (kEvalN - rank() + world() - 1) / world();
  EXPECT_EQ(mod.steps, (shard + kEvalBatch - 1) / kEvalBatch);

  EXPECT_EQ(r.at("count"), static_cast<double>(kEvalN));               // every sample exactly once...
  EXPECT_EQ(r.at("index_sum"), static_cast<double>(kEvalN * (kEvalN - 1) / 2));  // ...and each distinct one
  EXPECT_DOUBLE_EQ(r.at("f1"), ref.f1.compute().item());
  EXPECT_DOUBLE_EQ(r.at("precision"), ref.precision.compute().item());
  EXPECT_DOUBLE_EQ(r.at("recall"), ref.recall.compute().item());
  EXPECT_DOUBLE_EQ(r.at("acc"), ref.accuracy.compute().item());
  EXPECT_NEAR(r.at("auroc"), ref.auroc.compute().item(), 1e-6);
  EXPECT_NEAR(r.at("feat0"), feat0, 1e-6);
  EXPECT_EQ(r.at("i8_samples"), static_cast<double>(kEvalN));
  // The callback metrics are the same global values on every rank.
  MetricMap cb = trainer.callback_metrics();
  EXPECT_EQ(cb.at("count"), static_cast<double>(kEvalN));
  EXPECT_NEAR(cb.at("feat0"), feat0, 1e-6);
  // Identical on every rank, bit for bit.
  for (const char* k : {"f1", "precision", "recall", "acc", "auroc", "feat0"}) {
    Tensor mine = from_vector<double>({r.at(k)});
    Tensor gathered = pg().all_gather(mine);
    for (int q = 0; q < world(); ++q) EXPECT_EQ(gathered.to_vector<double>()[q], r.at(k)) << k << " rank " << q;
  }
}

// The mean of per-rank means differs from the weighted mean for this split: the test above can tell them apart.
TEST(DDPTrainer, EvalSplitMakesMeanOfMeansDiffer) {
  if (world() == 1) GTEST_SKIP() << "one rank: nothing to split";
  double mean_of_means = 0, weighted = 0;
  for (int q = 0; q < world(); ++q) {
    double s = 0;
    int64_t c = 0;
    for (int64_t i = q; i < kEvalN; i += world(), ++c) s += static_cast<float>(std::sin(1.3 * i));
    mean_of_means += s / c / world();
    weighted += s;
  }
  weighted /= kEvalN;
  EXPECT_GT(std::abs(mean_of_means - weighted), 1e-4);
}

// Fewer evaluation samples than ranks: the last rank's shard is empty, so it logs nothing and would skip the
// epoch-end collectives the others wait in. Every rank must get a clear error instead of a hang (found by this
// test: it timed out before ResultCollection::compute_epoch checked the synced structure).
TEST(DDPTrainer, EmptyEvaluationShardIsAnErrorOnEveryRankNotAHang) {
  if (world() < 3) GTEST_SKIP() << "needs a rank without samples (2 samples over 3+ ranks)";
  auto full_ds = eval_data();
  auto ds = std::make_shared<data::TensorDataset>(full_ds->inputs().narrow(0, 0, 2).contiguous(),
                                                  full_ds->targets().narrow(0, 0, 2).contiguous());
  {
    Trainer trainer(ddp_options());
    EvalModule mod;
    auto loader = std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = kEvalBatch});
    VOLT_EXPECT_ERROR(trainer.validate(mod, loader), "different synced values");
  }
  // The error was agreed, not a timeout: the group still works.
  Tensor t = full({1}, 1.0);
  pg().all_reduce(t);
  EXPECT_EQ(t.item(), static_cast<double>(world()));
}

// ---- all_gather ------------------------------------------------------------------------------------------------

struct GatherModule : TrainModule {
  Tensor dummy;
  Tensor equal, scalar, number;
  std::vector<Tensor> uneven, vec;
  std::map<std::string, Tensor> map;
  bool mismatch = false;
  std::string mismatch_error;
  GatherModule() { dummy = register_parameter("dummy", zeros({1})); }
  std::string type_name() const override { return "GatherModule"; }
  void validation_step(const Batch&, int64_t) override {}
  void on_validation_epoch_end() override {
    const double r = global_rank();
    equal = all_gather(full({2, 3}, r + 1.0));
    scalar = all_gather(scalar_tensor(10.0 * r));
    number = all_gather(0.5 + r);
    uneven = all_gather_uneven(full({global_rank() + 1, 2}, r, DType::f64));
    vec = all_gather(std::vector<Tensor>{full({2}, r), from_vector<int64_t>({global_rank() * 100})});
    map = all_gather(std::map<std::string, Tensor>{{"a", full({1}, r)}, {"b", full({2, 2}, 2 * r)}});
    if (mismatch && world_size() > 1) {
      std::map<std::string, Tensor> bad{{global_rank() == 0 ? "x" : "y", full({1}, r)}};
      try {
        all_gather(bad);
      } catch (const Error& e) {
        mismatch_error = e.what();
      }
    }
  }
};

std::shared_ptr<data::DataLoader> tiny_eval_loader() {
  return std::make_shared<data::DataLoader>(
      std::make_shared<data::TensorDataset>(zeros({4, 1}), zeros({4})), data::DataLoaderOptions{.batch_size = 2});
}

TEST(DDPTrainer, AllGatherShapesAndContent) {
  Trainer trainer(ddp_options());
  GatherModule m;
  m.mismatch = true;
  trainer.validate(m, tiny_eval_loader());
  const int w = world();
  if (w == 1) {
    // One process: everything comes back unchanged (a number as a 0-d f64 tensor).
    EXPECT_EQ(m.equal.shape(), (Shape{2, 3}));
    EXPECT_EQ(m.scalar.dim(), 0);
    EXPECT_EQ(m.number.dim(), 0);
    EXPECT_EQ(m.number.dtype(), DType::f64);
    EXPECT_EQ(m.number.item(), 0.5);
    ASSERT_EQ(m.uneven.size(), 1u);
    EXPECT_EQ(m.uneven[0].shape(), (Shape{1, 2}));
    ASSERT_EQ(m.vec.size(), 2u);
    EXPECT_EQ(m.vec[0].shape(), (Shape{2}));
    EXPECT_EQ(m.map.at("b").shape(), (Shape{2, 2}));
    return;
  }
  ASSERT_EQ(m.equal.shape(), (Shape{w, 2, 3}));
  std::vector<float> eq = m.equal.contiguous().to_vector<float>();
  for (int q = 0; q < w; ++q)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(eq[q * 6 + j], q + 1.0f);
  ASSERT_EQ(m.scalar.shape(), (Shape{w}));
  ASSERT_EQ(m.number.shape(), (Shape{w}));
  EXPECT_EQ(m.number.dtype(), DType::f64);
  for (int q = 0; q < w; ++q) {
    EXPECT_EQ(m.scalar.to_vector<float>()[q], 10.0f * q);
    EXPECT_EQ(m.number.to_vector<double>()[q], 0.5 + q);
  }
  ASSERT_EQ(m.uneven.size(), static_cast<size_t>(w));
  for (int q = 0; q < w; ++q) {
    ASSERT_EQ(m.uneven[q].shape(), (Shape{q + 1, 2}));
    for (double v : m.uneven[q].contiguous().to_vector<double>()) EXPECT_EQ(v, q);
  }
  ASSERT_EQ(m.vec.size(), 2u);
  ASSERT_EQ(m.vec[0].shape(), (Shape{w, 2}));
  ASSERT_EQ(m.vec[1].shape(), (Shape{w, 1}));
  EXPECT_EQ(m.vec[1].dtype(), DType::i64);
  for (int q = 0; q < w; ++q) {
    EXPECT_EQ(m.vec[0].contiguous().to_vector<float>()[q * 2 + 1], static_cast<float>(q));
    EXPECT_EQ(m.vec[1].contiguous().to_vector<int64_t>()[q], 100 * q);
  }
  ASSERT_EQ(m.map.size(), 2u);
  ASSERT_EQ(m.map.at("a").shape(), (Shape{w, 1}));
  ASSERT_EQ(m.map.at("b").shape(), (Shape{w, 2, 2}));
  for (int q = 0; q < w; ++q) {
    EXPECT_EQ(m.map.at("a").contiguous().to_vector<float>()[q], static_cast<float>(q));
    EXPECT_EQ(m.map.at("b").contiguous().to_vector<float>()[q * 4 + 3], 2.0f * q);
  }
  // Different keys on different ranks: an error on every rank, naming both key sets.
  EXPECT_NE(m.mismatch_error.find("different containers"), std::string::npos) << m.mismatch_error;
  EXPECT_NE(m.mismatch_error.find("\"x\""), std::string::npos) << m.mismatch_error;
}

// Without a Trainer (or with one process) all_gather is the identity.
TEST(DDPTrainer, AllGatherWithoutTrainerIsIdentity) {
  GatherModule m;
  Tensor t = full({3}, 2.0);
  EXPECT_EQ(m.all_gather(t).shape(), (Shape{3}));
  EXPECT_EQ(m.all_gather(1.5).dim(), 0);
  EXPECT_EQ(m.all_gather(1.5).item(), 1.5);
  EXPECT_EQ(m.all_gather_uneven(t).size(), 1u);
}

// ---- rank_zero_only monitoring and checkpoints -------------------------------------------------------------

// Logs "score" on rank 0 only: 5, 3, 4, 2, 1, ... by epoch (improves, then worsens at epoch 2).
struct ScoreModule : TrainModule {
  Tensor w;
  ScoreModule() { w = register_parameter("w", full({2}, 0.5)); }
  std::string type_name() const override { return "ScoreModule"; }
  Tensor training_step(const Batch& b, int64_t) override {
    return mse_loss((b.input * w).sum({1}), b.target);
  }
  void validation_step(const Batch& b, int64_t) override {}
  void on_validation_epoch_end() override {
    static const double scores[] = {5, 3, 4, 2, 1, 0.5, 0.25, 0.1, 0.05, 0.01};
    if (global_rank() == 0) log("score", scores[current_epoch()], {.rank_zero_only = true});
  }
  Optimizers configure_optimizers() override { return optim::SGD(parameters(), {.lr = 0.05}); }
};

using test::shared_dir;

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DDPTrainer, RankZeroOnlyValueDrivesEarlyStoppingAndCheckpointOnEveryRank) {
  std::string dir = shared_dir("ckpt");
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "score", .patience = 1});
  auto ck = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .dirpath = dir, .filename = "best-{epoch}", .monitor = "score", .mode = "min", .save_top_k = 1,
      .save_last = true});
  TrainerOptions o = ddp_options();
  o.max_epochs = 10;
  o.enable_checkpointing = true;
  o.callbacks = {es, ck};
  Trainer trainer(o);
  ScoreModule m;
  auto train = std::make_shared<data::DataLoader>(
      std::make_shared<data::TensorDataset>(rand_with_seed({12, 2}, 5, 0), rand_with_seed({12}, 6, 0)),
      data::DataLoaderOptions{.batch_size = 2});
  trainer.fit(m, train, tiny_eval_loader());

  // The same stop on every rank: epoch 2 (4 > best 3, patience 1), so three epochs ran.
  EXPECT_EQ(es->stopped_epoch(), 2);
  EXPECT_EQ(es->best_score(), 3.0);
  EXPECT_EQ(trainer.current_epoch(), 3);
  EXPECT_TRUE(trainer.should_stop());
  // Every rank agrees on the best checkpoint (rank 0's value, broadcast).
  EXPECT_EQ(fs::path(ck->best_model_path()).filename().string(), "best-1");
  EXPECT_EQ(ck->best_model_score(), 3.0);

  // Rank 0 alone writes: a rank-specific stem exists only for rank 0.
  trainer.save_checkpoint((fs::path(dir) / ("from_rank" + std::to_string(rank()))).string());
  pg().barrier();
  std::vector<std::string> want = {"best-1.json", "best-1.safetensors", "from_rank0.json",
                                   "from_rank0.safetensors", "last.json", "last.safetensors"};
  EXPECT_EQ(files_in(dir), want);

  // The checkpoint (written by one rank of N) loads into a one-process Trainer on every rank.
  ScoreModule fresh;
  TrainerOptions single = ddp_options();
  single.strategy = "single_device";
  Trainer one(single);
  ASSERT_EQ(one.strategy().world_size(), 1);
  one.validate(fresh, tiny_eval_loader(), (fs::path(dir) / "last").string());
  EXPECT_EQ(params_of(fresh), params_of(m));
  EXPECT_NE(params_of(fresh)[0], (std::vector<double>{0.5, 0.5}));  // it trained: the load moved the values

  pg().barrier();
  if (rank() == 0) fs::remove_all(dir);
}

TEST(DDPTrainer, AFilenameTemplateOneRankCannotFillFailsOnEveryRank) {
  // "score" is logged on rank 0 only: the other ranks cannot fill {score}. Every rank fails at once (before,
  // rank 0 went on into the checkpoint's collectives and waited for the timeout).
  std::string dir = shared_dir("ckpt_template");
  auto ck = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir, .filename = "s-{score:.1f}"});
  TrainerOptions o = ddp_options();
  o.max_epochs = 1;
  o.enable_checkpointing = true;
  o.callbacks = {ck};
  Trainer trainer(o);
  ScoreModule m;
  auto train = std::make_shared<data::DataLoader>(
      std::make_shared<data::TensorDataset>(rand_with_seed({12, 2}, 5, 0), rand_with_seed({12}, 6, 0)),
      data::DataLoaderOptions{.batch_size = 2});
  const auto t0 = std::chrono::steady_clock::now();
  if (world() == 1) {
    trainer.fit(m, train, tiny_eval_loader());  // one rank has the value
    EXPECT_TRUE(fs::exists(dir + "/s-5.0.json"));
  } else {
    try {
      trainer.fit(m, train, tiny_eval_loader());
      ADD_FAILURE() << "fit should have failed on rank " << rank();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(rank() == 0 ? "another rank" : "{score"), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  }
  pg().barrier();
  if (rank() == 0) fs::remove_all(dir);
}

}  // namespace

TEST(DDPStrategyValues, AgreedValueComesFromTheLowestRankThatHasIt) {
  volt::DeviceSelection sel;
  sel.accelerator = "cpu";
  sel.device_ids = {0};
  sel.num_processes = 1;
  sel.devices_auto = true;  // the launcher's processes, whatever their number
  volt::DDPStrategy s(sel);
  const int r = s.global_rank(), w = s.world_size();
  // Rank 0 lacks the value (e.g. an empty shard): every rank gets rank 1's, never a made-up NaN.
  std::optional<double> v = s.agreed_value(r == 0 ? std::nullopt : std::optional<double>(10.0 + r));
  if (w == 1) {
    EXPECT_FALSE(v.has_value());
  } else {
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*v, 11.0);
  }
  EXPECT_FALSE(s.agreed_value(std::nullopt).has_value());
  EXPECT_EQ(s.agreed_value(static_cast<double>(r)).value(), 0.0);
}

// One rank: a DDP backward leaves every gradient exactly as a plain backward makes it (same storage, same bits)
// and finish_gradient_sync issues no collective.
TEST(DDPStrategyOneRank, GradientsAreUntouched) {
  if (dist::default_group().world_size() != 1) GTEST_SKIP() << "world size 1 only (distributed_np1)";
  volt::DeviceSelection sel;
  sel.accelerator = "cpu";
  sel.device_ids = {0};
  sel.num_processes = 1;
  sel.devices_auto = true;  // the launcher's processes, whatever their number
  volt::DDPStrategy s(sel);
  MlpModule m, ref;
  s.setup(m);
  auto ds = regression_data(6);
  Batch b = ds->get_batch({0, 1, 2, 3, 4, 5});
  for (int step = 0; step < 2; ++step) {
    const uint64_t seq = dist::default_group().sequence_number();
    s.backward(m.loss_of(b), /*sync_grad=*/true);
    std::vector<const void*> ptrs;
    std::vector<std::vector<double>> vals;
    for (auto& [name, p] : m.named_parameters()) {
      ptrs.push_back(p.grad().data_ptr());
      vals.push_back(p.grad().to_vector<double>());
    }
    s.finish_gradient_sync();
    EXPECT_EQ(dist::default_group().sequence_number(), seq);
    ref.loss_of(b).backward();
    auto mp = m.named_parameters(), rp = ref.named_parameters();
    for (size_t i = 0; i < mp.size(); ++i) {
      EXPECT_EQ(mp[i].second.grad().data_ptr(), ptrs[i]) << mp[i].first;
      EXPECT_EQ(mp[i].second.grad().to_vector<double>(), vals[i]) << mp[i].first;
      EXPECT_EQ(mp[i].second.grad().to_vector<double>(), rp[i].second.grad().to_vector<double>()) << mp[i].first;
    }
  }
  s.teardown(m);
}
