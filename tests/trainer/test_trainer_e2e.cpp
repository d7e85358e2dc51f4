// End to end: an MLP of nn layers on a synthetic 3-class problem through a DataModule, with a metric object,
// EarlyStopping and ModelCheckpoint together; also the per-batch overhead of the loop.
#include <chrono>

#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;

namespace {
struct Blobs : data::DataModule {
  std::shared_ptr<data::Dataset> train, val;
  int setups = 0;
  void setup(const std::string& stage) override {
    ++setups;
    manual_seed(5);
    auto make = [](int64_t n, uint64_t seed) {
      std::vector<int64_t> labels(n);
      for (int64_t i = 0; i < n; ++i) labels[i] = i % 3;
      Tensor y = from_vector(labels, {n});
      Tensor centers = from_vector<float>({2, 0, -2, 2, 0, -2}, {3, 2});
      Tensor x = index_select(centers, 0, y) + randn({n, 2}, DType::f32, kCPU, nullptr, 0.0, 0.5);
      return std::make_shared<data::TensorDataset>(x, y);
    };
    train = make(240, 1);
    val = make(60, 2);
  }
  std::shared_ptr<data::DataLoader> train_dataloader() override {
    return std::make_shared<data::DataLoader>(train, data::DataLoaderOptions{.batch_size = 16, .shuffle = true});
  }
  std::shared_ptr<data::DataLoader> val_dataloader() override {
    return std::make_shared<data::DataLoader>(val, data::DataLoaderOptions{.batch_size = 16});
  }
};

struct Mlp : TrainModule {
  nn::Linear l1{2, 16}, l2{16, 3};
  metrics::Accuracy acc{{.task = metrics::Task::Multiclass, .num_classes = 3}};
  Mlp() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  Tensor forward(const Tensor& x) { return l2(l1(x).relu()); }
  Tensor training_step(const Batch& b, int64_t) override {
    Tensor loss = cross_entropy(forward(b.input), b.target);
    log("train_loss", loss, {.on_epoch = true, .prog_bar = true});
    return loss;
  }
  void validation_step(const Batch& b, int64_t) override {
    Tensor logits = forward(b.input);
    log("val_loss", cross_entropy(logits, b.target));
    acc.update(logits, b.target);
    log("val_acc", acc);
  }
  Optimizers configure_optimizers() override { return optim::Adam(parameters(), {.lr = 0.05}); }
};
}  // namespace

TEST(TrainerE2E, MlpLearnsBlobsWithCallbacks) {
  ScratchDir dir("e2e");
  manual_seed(3);
  Mlp m;
  Blobs dm;
  auto o = quiet(dir.str());
  o.max_epochs = 30;
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_acc", .mode = "max",
                                                                  .stopping_threshold = 0.95});
  auto ck = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.monitor = "val_loss"});
  o.callbacks = {es, ck};
  Trainer t(o);
  t.fit(m, dm);
  auto cm = t.callback_metrics();
  EXPECT_GT(cm.at("val_acc"), 0.95);
  EXPECT_LT(t.current_epoch(), 30);  // the threshold stopped it early
  EXPECT_LT(cm.at("train_loss_epoch"), 0.5);
  EXPECT_TRUE(std::filesystem::exists(ck->best_model_path() + ".safetensors"));
  EXPECT_EQ(ck->best_model_path().find(t.logger()->log_dir() + "/checkpoints/"), 0u);
  EXPECT_EQ(dm.setups, 1);
}

TEST(TrainerE2E, LoopOverheadPerBatch) {
  ScratchDir dir("overhead");
  TinyModule m;
  auto o = quiet(dir.str());
  o.max_epochs = 1;
  o.logger = false;
  auto loader = make_loader(2000, 1);
  Trainer t(o);
  auto t0 = std::chrono::steady_clock::now();
  t.fit(m, loader);
  double per_batch_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 2000.0;
  // Raw loop doing the same work, for comparison.
  TinyModule r;
  optim::SGD opt(r.parameters(), {.lr = 0.1});
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < 2000; ++i) {
    auto b = loader->next();
    Tensor loss = mse_loss(r.predict(b->input), b->target);
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  double raw_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() / 2000.0;
  std::printf("trainer loop: %.1f us/batch, raw loop: %.1f us/batch\n", per_batch_us, raw_us);
  EXPECT_EQ(t.global_step(), 2000);
  EXPECT_LT(per_batch_us, raw_us * 3 + 50);
}
