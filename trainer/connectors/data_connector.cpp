// The Trainer's side of the data: a loader prepared for the strategy (distributed sampler, pinned upload),
// batches fetched ahead and converted for the precision in use.
#include <volt/trainer/trainer.h>

#include <volt/runtime/trace.h>
#include <volt/trainer/connectors/callback_calls.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <volt/kernels/cudnn_benchmark.h>
#include <volt/kernels/ops.h>
#include <volt/nn/layers/batchnorm.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/generator.h>
#include <volt/runtime/log.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/interrupt_guard.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/model_summary.h>

namespace volt {

void Trainer::prepare_loader(data::DataLoader& loader, bool training) {
  uint64_t seed = global_seed() >= 0 ? static_cast<uint64_t>(global_seed()) : loader.options().seed;
  bool shuffle = training && (loader.options().shuffle ||
                              dynamic_cast<const data::RandomSampler*>(loader.sampler().get()) != nullptr);
  if (shuffle && overfit_) {
    // Overfitting means the same batches every epoch.
    if (strategy_->is_global_zero())
      logging::warn("Trainer: overfit_batches is set but the training loader shuffles; shuffling is turned off");
    shuffle = false;
    if (strategy_->world_size() == 1)
      loader.set_sampler(std::make_shared<data::SequentialSampler>(loader.dataset()->size()));
  }
  if (shuffle && global_seed() >= 0 && !loader.options().sampler && strategy_->world_size() == 1)
    loader.set_sampler(std::make_shared<data::RandomSampler>(loader.dataset()->size(), seed));
  strategy_->process_dataloader(loader, training, shuffle, seed);
}

std::optional<Batch> Trainer::fetch_batch(data::DataLoader& loader) {
  std::optional<Batch> b;
  {
    trace::Range range(trace::Layer::data, [&] { return "[DataLoader]" + (stage_ == Stage::none ? std::string("next") : std::string(name(stage_)) + "_next"); });
    b = loader.next();
  }
  if (b) {
    const Device dev = strategy_->root_device();
    trace::Range range(trace::Layer::data, "[Batch]to_device",
                       {dev, b->nbytes()});
    // Queued on the copy stream without making the compute stream wait yet: the caller's current step does not
    // wait for the next batch's copy; the loops call wait_for_upload() when they take the batch.
    b = convert_input(b->upload_ahead(dev));
  }
  return b;
}

void Trainer::enter_forward(std::optional<AutocastGuard>& guard) const {
  if (is_mixed(precision_)) guard.emplace(true, precision_autocast_dtype(precision_));
}

Batch Trainer::convert_input(Batch batch) const {
  const DType dt = precision_param_dtype(precision_);
  if (dt == DType::f32) return batch;
  batch.wait_for_upload();  // the casts below read it on the compute stream
  // Floating inputs, targets and fields follow the parameters (as upstream's half/double plugins convert the
  // batch); integer class indices stay as they are.
  auto convert = [dt](Tensor& t) {
    if (t.defined() && is_floating(t.dtype())) t = t.to(dt);
  };
  convert(batch.input);
  convert(batch.target);
  for (auto& [name, t] : batch.fields) convert(t);
  return batch;
}

}  // namespace volt
