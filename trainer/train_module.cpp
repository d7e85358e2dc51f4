#include <volt/trainer/train_module.h>

#include <volt/kernels/ops.h>
#include <volt/nn/metrics.h>
#include <volt/trainer/replica_logs.h>
#include <volt/trainer/result_collection.h>
#include <volt/trainer/trainer.h>

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
StepOutput TrainModule::training_step_outputs(const Batch& batch, int64_t batch_idx) {
  Tensor loss = training_step(batch, batch_idx);
  // Checked here, on what training_step returned (once per replica under dp/ddp2), not in training_step_end,
  // whose default averages the gathered per-replica losses: a per-sample or per-class loss would be averaged too.
  VOLT_CHECK(!loss.defined() || loss.numel() == 1, type_name(), "::training_step returned a loss of shape ",
             loss.shape_str(), "; return a scalar (e.g. loss.mean() or loss.sum()), or an undefined Tensor to skip "
             "the batch");
  return {{"loss", loss}};
}
StepOutput TrainModule::validation_step_outputs(const Batch& batch, int64_t batch_idx) {
  validation_step(batch, batch_idx);
  return {};
}
StepOutput TrainModule::test_step_outputs(const Batch& batch, int64_t batch_idx) {
  test_step(batch, batch_idx);
  return {};
}
Tensor TrainModule::training_step_end(const StepOutput& outputs) {
  auto it = outputs.find("loss");
  VOLT_CHECK(it != outputs.end(), type_name(), "::training_step_end: the step outputs have no \"loss\"; return it ",
             "from training_step_outputs, or override training_step_end to compute the loss");
  const Tensor& loss = it->second;
  if (!loss.defined() || loss.numel() == 1) return loss;
  return loss.mean();  // one loss per data-parallel replica, as upstream's default reduction
}

static ResultCollection& active(ResultCollection* rc, const char* hook, const std::string& name) {
  VOLT_CHECK(rc != nullptr, "log(\"", name, "\"): called ", hook ? "in hook " : "outside of a Trainer hook",
             hook ? hook : "", "; logging is only available inside the Trainer's step and epoch hooks");
  return *rc;
}

// On a dp replica's thread log() is recorded for that replica and merged on the calling thread afterwards
// (trainer/strategies/data_parallel.h): the result collection is not shared between threads.
static bool record_on_replica(const std::string& name, const Tensor& value, metrics::Metric* metric,
                              const LogOptions& options) {
  detail::ReplicaLogs* logs = detail::replica_logs();
  if (!logs) return false;
  VOLT_CHECK(metric || (value.defined() && value.numel() == 1), "log(\"", name, "\") in a dp replica: expected a ",
             "scalar (one element) but got ", value.defined() ? "a tensor of shape " + value.shape_str() : "an undefined tensor");
  logs->records.push_back({name, metric ? Tensor() : value.detach(), metric, options,
                           options.batch_size.value_or(logs->slice_size > 0 ? logs->slice_size : 1)});
  return true;
}

void TrainModule::log(const std::string& name, const Tensor& value, LogOptions options) {
  if (record_on_replica(name, value, nullptr, options)) return;
  active(results_, hook_, name).log(hook_, name, value, options, batch_size_);
}
void TrainModule::log(const std::string& name, double value, LogOptions options) {
  if (detail::replica_logs() && record_on_replica(name, scalar_tensor(value, DType::f64, device_), nullptr, options))
    return;
  active(results_, hook_, name).log(hook_, name, value, options, batch_size_);
}
void TrainModule::log(const std::string& name, metrics::Metric& metric, LogOptions options) {
  if (record_on_replica(name, Tensor(), &metric, options)) return;
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
// ---- all_gather --------------------------------------------------------------------------------------------

// The strategy to gather through, or nullptr when the input comes back unchanged (no trainer, one process).
static Collectives* gather_strategy(Trainer* trainer) {
  VOLT_CHECK(detail::replica_logs() == nullptr, "all_gather: called inside a step that runs in dp replicas (strategy ",
             "dp/ddp2 run the steps on several threads); gather in training_step_end / validation_step_end / ",
             "test_step_end, which run once per batch on the gathered outputs");
  if (!trainer || trainer->strategy().world_size() == 1) return nullptr;
  return &trainer->collectives();
}

Tensor TrainModule::all_gather(const Tensor& t, bool sync_grads) const {
  VOLT_CHECK(t.defined(), type_name(), "::all_gather: the tensor is undefined; every rank must pass a tensor");
  Collectives* s = gather_strategy(trainer_);
  return s ? s->all_gather(t, sync_grads) : t;
}

Tensor TrainModule::all_gather(double value) const {
  Collectives* s = gather_strategy(trainer_);
  Tensor v = scalar_tensor(value, DType::f64, device_);
  return s ? s->all_gather(v.reshape({1})).reshape({s->world_size()}) : v;
}

// Every rank must bring the same structure: agree on a description of it before gathering, so a mismatch is
// an error on every rank instead of a silent pairing of unrelated tensors (or a hang).
static void check_same_structure(Collectives& s, const std::string& what, const std::string& mine) {
  std::string ref = s.broadcast_string(mine, 0);
  bool differs = s.reduce_decision(ref != mine, /*all=*/false);
  VOLT_CHECK(!differs, what, ": ranks passed different containers (rank 0: [", ref, "], rank ", s.global_rank(),
             ": [", mine, "]); every rank must gather the same number of tensors / the same keys");
}

std::vector<Tensor> TrainModule::all_gather(const std::vector<Tensor>& tensors) const {
  Collectives* s = gather_strategy(trainer_);
  if (!s) return tensors;
  check_same_structure(*s, type_name() + "::all_gather(vector)", std::to_string(tensors.size()) + " tensors");
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (auto& t : tensors) out.push_back(all_gather(t));
  return out;
}

std::map<std::string, Tensor> TrainModule::all_gather(const std::map<std::string, Tensor>& tensors) const {
  Collectives* s = gather_strategy(trainer_);
  if (!s) return tensors;
  std::string keys;
  for (auto& [k, v] : tensors) keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
  check_same_structure(*s, type_name() + "::all_gather(map)", keys);
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : tensors) out.emplace(k, all_gather(v));  // std::map order: the same on every rank
  return out;
}

std::vector<Tensor> TrainModule::all_gather_uneven(const Tensor& t) const {
  VOLT_CHECK(t.defined(), type_name(), "::all_gather_uneven: the tensor is undefined; every rank must pass one");
  Collectives* s = gather_strategy(trainer_);
  return s ? s->all_gather_uneven(t) : std::vector<Tensor>{t};
}

// The parameters `optimizer` steps: under a sharded strategy its groups hold flat shards, and the strategy knows
// which parameters they stand for.
std::vector<Tensor> TrainModule::toggled_parameters(const optim::Optimizer& optimizer) const {
  if (trainer_) return trainer_->strategy().optimizer_parameters(optimizer);
  return SingleDeviceStrategy(device_).optimizer_parameters(optimizer);  // not attached: the groups' tensors
}

void TrainModule::toggle_optimizer(const optim::Optimizer& optimizer) {
  untoggle_optimizer();
  std::vector<const TensorImpl*> owned;
  for (auto& p : toggled_parameters(optimizer)) owned.push_back(p.impl());
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
    : m_(m),
      prev_results_(m.results_),
      prev_hook_(m.hook_),
      prev_batch_size_(m.batch_size_),
      range_(trace::Layer::trainer, [&] { return std::string("[TrainModule]") + hook; }) {
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
