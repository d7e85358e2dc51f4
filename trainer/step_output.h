#pragma once
/// @file
/// What one step of the training module returns, and the step function a strategy runs (one device: on the
/// calling thread; dp/ddp2: once per replica, trainer/strategies/dp.h).
#include <functional>
#include <map>
#include <string>

#include <volt/data/batch.h>
#include <volt/kernels/tensor.h>

namespace volt {

class TrainModule;

/// What a step returns to its `*_step_end` hook: named tensors (the training loss under "loss").
using StepOutput = std::map<std::string, Tensor>;
/// One step of `module` on a batch (or, under dp, of one replica's module on its slice of the batch: the root
/// module itself, or the replica made by TrainModule::make_replica).
using StepFn = std::function<StepOutput(TrainModule& module, const data::Batch&)>;

}  // namespace volt
