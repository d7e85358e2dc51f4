// Evaluation: validation inside fit (and its sanity check), the eval loop shared by validate/test, their
// entry points, predict, and the results table printed after validate/test.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <cmath>
#include <typeinfo>

#include <fmt/format.h>

#include <volt/kernels/ops.h>
#include <volt/nn/clip_grad.h>
#include <volt/runtime/trace.h>
#include <volt/trainer/connectors/callback_calls.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/trainer.h>

namespace volt {

void Trainer::run_validation(data::DataLoader& val, bool sanity) {
  TrainModule& m = *module_;
  const Stage prev_stage = stage_;
  stage_ = Stage::validate;
  sanity_checking_ = sanity;
  int64_t limit = opt_.limit_val_batches.resolve(val.size(), "limit_val_batches");
  if (sanity && opt_.num_sanity_val_steps >= 0) limit = std::min(limit, opt_.num_sanity_val_steps);
  bool was_training = m.is_training();
  m.eval();
  if (!sanity)
    for_each_callback(callbacks_, "on_validation_start", [&](Callback& c) { c.on_validation_start(*this, m); });
  eval_loop(val, "validate", limit, sanity);
  if (!sanity && val_has_step_) {
    ++val_runs_;
    update_callback_metrics(results_eval_.epoch_callback_metrics());
    for (auto& [k, v] : results_eval_.epoch_pbar_metrics()) last_pbar_[k] = v;
    log_epoch_metrics(results_eval_);
    for_each_callback(callbacks_, "on_validation_end", [&](Callback& c) { c.on_validation_end(*this, m); });
  }
  // A stop request from a validation-end callback must hold on every rank.
  if (!sanity) should_stop_ = stop_agreed_ = strategy_->reduce_decision(should_stop_, /*all=*/false);
  m.train(was_training);
  sanity_checking_ = false;
  stage_ = prev_stage;
}

int64_t Trainer::eval_loop(data::DataLoader& loader, const char* stage, int64_t max_batches, bool sanity) {
  TrainModule& m = *module_;
  bool is_test = std::string(stage) == "test";
  NoGradGuard ng;
  results_eval_ = ResultCollection(is_test ? "test" : "validate");
  const char* step_hook = is_test ? "test_step" : "validation_step";
  {
    LogScope s(m, &results_eval_, is_test ? "on_test_epoch_start" : "on_validation_epoch_start");
    if (is_test) m.on_test_epoch_start();
    else m.on_validation_epoch_start();
  }
  pbar_->start(sanity ? "Sanity Checking" : is_test ? "Testing" : "Validation", max_batches);
  // A new pass whose sampler epoch is the trainer's (as upstream): a shuffling evaluation loader gives the
  // sanity check and epoch 0's validation the same order, and each epoch its own.
  loader.set_epoch(epoch_);
  int64_t i = 0;
  // One batch in flight, as in train_epoch; the pass (and any batch fetched ahead) ends with loader.reset().
  std::optional<Batch> next = max_batches > 0 ? fetch_batch(loader) : std::nullopt;
  for (; i < max_batches; ++i) {
    if (!next) break;
    Batch batch = std::move(*next);
    next.reset();
    batch.wait_for_upload();
    if (i + 1 < max_batches) next = fetch_batch(loader);
    results_eval_.begin_step();
    {
      std::optional<AutocastGuard> ac;
      enter_forward(ac);
      StepOutput out;
      strategy_->module_step_begin();
      {
        LogScope s(m, &results_eval_, step_hook, batch.size());
        m.default_step_called_ = false;
        out = strategy_->run_step(m, batch, [&](TrainModule& r, const Batch& b) {
          return is_test ? r.test_step_outputs(b, i) : r.validation_step_outputs(b, i);
        });
      }
      if (!is_test && m.default_step_called_) {  // validation_step not overridden: no validation loop
        strategy_->module_step_end();
        val_has_step_ = false;
        break;
      }
      {
        LogScope s(m, &results_eval_, is_test ? "test_step_end" : "validation_step_end", batch.size());
        if (is_test) m.test_step_end(out);
        else m.validation_step_end(out);
      }
      strategy_->module_step_end();
    }
    results_eval_.end_step(*strategy_);
    if (!sanity && results_eval_.has_step_values() && !loggers_.empty()) {
      MetricMap sm = results_eval_.step_logger_metrics();
      if (!sm.empty()) {
        sm["epoch"] = static_cast<double>(epoch_);
        log_to_loggers(sm, eval_log_step());
      }
    }
    pbar_->update(i);
  }
  loader.reset();
  if (!val_has_step_ && !is_test) {
    pbar_->finish();
    return 0;
  }
  {
    LogScope s(m, &results_eval_, is_test ? "on_test_epoch_end" : "on_validation_epoch_end");
    if (is_test) m.on_test_epoch_end();
    else m.on_validation_epoch_end();
  }
  results_eval_.compute_epoch(*strategy_);
  pbar_->finish(results_eval_.epoch_pbar_metrics());
  return i;
}

std::vector<MetricMap> Trainer::run_eval_entry(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                               const char* stage, const std::string& ckpt_path) {
  VOLT_CHECK(loader != nullptr, "Trainer::", stage, ": no loader (the data module returned nullptr)");
  profile_start(stage);
  FailedRunGuard failed_run{*this};
  attach(module);
  prepare_loader(*loader, false);
  if (!ckpt_path.empty()) resume_from(resolve_ckpt_path(ckpt_path), /*fitting=*/false);
  bool is_test = std::string(stage) == "test";
  int64_t n = (is_test ? opt_.limit_test_batches : opt_.limit_val_batches)
                  .resolve(loader->size(), is_test ? "limit_test_batches" : "limit_val_batches");
  stage_ = is_test ? Stage::test : Stage::validate;
  module.eval();
  {
    trace::Range range(trace::Layer::trainer, is_test ? "run_test" : "run_validation");
    eval_loop(*loader, stage, n, false);
  }
  MetricMap cb = results_eval_.epoch_callback_metrics();
  update_callback_metrics(cb);
  log_epoch_metrics(results_eval_);
  MetricMap out = results_eval_.epoch_logger_metrics();
  if (is_test)
    for_each_callback(callbacks_, "on_test_end", [&](Callback& c) { c.on_test_end(*this, module); });
  if (strategy_->is_global_zero()) print_results_table(is_test ? "Test" : "Validate", out);
  module.train();
  detach();
  return {out};
}

std::vector<MetricMap> Trainer::validate(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                         const std::string& ckpt_path) {
  return run_eval_entry(module, std::move(loader), "validate", ckpt_path);
}

std::vector<MetricMap> Trainer::validate(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "validate");
  return validate(module, dm.val_dataloader(), ckpt_path);
}

std::vector<MetricMap> Trainer::test(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                     const std::string& ckpt_path) {
  return run_eval_entry(module, std::move(loader), "test", ckpt_path);
}

std::vector<MetricMap> Trainer::test(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "test");
  return test(module, dm.test_dataloader(), ckpt_path);
}

std::vector<Tensor> Trainer::predict(TrainModule& module, std::shared_ptr<data::DataLoader> loader,
                                     const std::string& ckpt_path) {
  VOLT_CHECK(loader != nullptr, "Trainer::predict: no loader (the data module returned nullptr)");
  profile_start("predict");
  FailedRunGuard failed_run{*this};
  attach(module);
  prepare_loader(*loader, false);
  if (!ckpt_path.empty()) resume_from(resolve_ckpt_path(ckpt_path), /*fitting=*/false);
  int64_t n = opt_.limit_predict_batches.resolve(loader->size(), "limit_predict_batches");
  stage_ = Stage::predict;
  module.eval();
  NoGradGuard ng;
  std::vector<Tensor> out;
  pbar_->start("Predicting", n);
  loader->reset();
  for (int64_t i = 0; i < n; ++i) {
    auto b = fetch_batch(*loader);
    if (!b) break;
    b->wait_for_upload();
    std::optional<AutocastGuard> ac;
    enter_forward(ac);
    trace::Range range(trace::Layer::trainer, "[TrainModule]predict_step");
    strategy_->module_step_begin();
    out.push_back(module.predict_step(*b, i));
    strategy_->module_step_end();
    pbar_->update(i);
  }
  loader->reset();
  pbar_->finish();
  module.train();
  detach();
  return out;
}

std::vector<Tensor> Trainer::predict(TrainModule& module, data::DataModule& dm, const std::string& ckpt_path) {
  prepare_datamodule(dm, "predict");
  return predict(module, dm.predict_dataloader(), ckpt_path);
}

void Trainer::print_results_table(const std::string& stage, const MetricMap& m) const {
  std::string head = stage + " metric";
  size_t w = head.size();
  for (auto& [k, v] : m) w = std::max(w, k.size());
  w += 2;
  std::string line(w + 22, '-');
  std::ostringstream os;
  os << line << "\n" << std::left << std::setw(static_cast<int>(w)) << head << "DataLoader 0\n" << line << "\n";
  for (auto& [k, v] : m) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    os << std::setw(static_cast<int>(w)) << k << buf << "\n";
  }
  os << line << "\n";
  std::cout << os.str() << std::flush;
}

}  // namespace volt
