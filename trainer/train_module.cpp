#include "trainer/train_module.h"

#include "nn/metrics.h"
#include "trainer/result_collection.h"
#include "trainer/trainer.h"

namespace volt {

Tensor TrainModule::training_step(const Batch&, int64_t) {
  VOLT_FAIL(type_name(), ": training_step is not implemented; override TrainModule::training_step to fit");
}
void TrainModule::validation_step(const Batch&, int64_t) { default_step_called_ = true; }
void TrainModule::test_step(const Batch&, int64_t) {
  VOLT_FAIL(type_name(), ": test_step is not implemented; override TrainModule::test_step to test");
}
Tensor TrainModule::predict_step(const Batch&, int64_t) {
  VOLT_FAIL(type_name(), ": predict_step is not implemented; override TrainModule::predict_step to predict");
}
Optimizers TrainModule::configure_optimizers() {
  VOLT_FAIL(type_name(), ": configure_optimizers is not implemented; return at least one optimizer");
}

static ResultCollection& active(ResultCollection* rc, const char* hook, const std::string& name) {
  VOLT_CHECK(rc != nullptr, "log(\"", name, "\"): called ", hook ? "in hook " : "outside of a Trainer hook",
             hook ? hook : "", "; logging is only available inside the Trainer's step and epoch hooks");
  return *rc;
}

void TrainModule::log(const std::string& name, const Tensor& value, LogOptions options) {
  active(results_, hook_, name).log(hook_, name, value, options, batch_size_);
}
void TrainModule::log(const std::string& name, double value, LogOptions options) {
  active(results_, hook_, name).log(hook_, name, value, options, batch_size_);
}
void TrainModule::log(const std::string& name, metrics::Metric& metric, LogOptions options) {
  active(results_, hook_, name).log_metric(hook_, name, metric, options);
}
void TrainModule::log_dict(const std::map<std::string, Tensor>& values, LogOptions options) {
  for (auto& [k, v] : values) log(k, v, options);
}
void TrainModule::log_dict(const std::map<std::string, double>& values, LogOptions options) {
  for (auto& [k, v] : values) log(k, v, options);
}

int TrainModule::global_rank() const { return trainer_ ? trainer_->strategy().global_rank() : 0; }
int TrainModule::world_size() const { return trainer_ ? trainer_->strategy().world_size() : 1; }
int64_t TrainModule::current_epoch() const { return trainer_ ? trainer_->current_epoch() : 0; }
int64_t TrainModule::global_step() const { return trainer_ ? trainer_->global_step() : 0; }
Tensor TrainModule::all_gather(const Tensor& t) const { return trainer_ ? trainer_->strategy().all_gather(t) : t; }

void TrainModule::toggle_optimizer(const optim::Optimizer& optimizer) {
  untoggle_optimizer();
  std::vector<const TensorImpl*> owned;
  for (auto& g : optimizer.param_groups())
    for (auto& p : g.params) owned.push_back(p.impl());
  for (auto& p : parameters()) {
    bool mine = std::find(owned.begin(), owned.end(), p.impl()) != owned.end();
    toggled_.emplace_back(p, p.requires_grad());
    if (!mine) {
      Tensor q = p;
      q.set_requires_grad(false);
    }
  }
}

void TrainModule::untoggle_optimizer() {
  for (auto& [p, flag] : toggled_) {
    Tensor q = p;
    q.set_requires_grad(flag);
  }
  toggled_.clear();
}

LogScope::LogScope(TrainModule& m, ResultCollection* results, const char* hook, int64_t batch_size)
    : m_(m), prev_results_(m.results_), prev_hook_(m.hook_), prev_batch_size_(m.batch_size_) {
  m.results_ = results;
  m.hook_ = hook;
  m.batch_size_ = batch_size;
}
LogScope::~LogScope() {
  m_.results_ = prev_results_;
  m_.hook_ = prev_hook_;
  m_.batch_size_ = prev_batch_size_;
}

}  // namespace volt
