#pragma once
// Internal: the module replicas behind dp / ddp2 over distinct devices (trainer/strategies/dp.h). Replica 0 is the
// root module itself; replica r > 0 is a second module (TrainModule::make_replica) on its own device whose
// parameters are, during a step, differentiable copies of the root's: one backward through every replica's graph
// sums all contributions in the root parameters' own gradient accumulators, so the optimizer, clipping, gradient
// accumulation and DDP's grad-ready hooks see exactly what they see with the one shared module.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <volt/trainer/train_module.h>

namespace volt::detail {

class ModuleReplicas {
 public:
  /// Builds replica r = 1..devices.size() on devices[r - 1]: root.make_replica(), cast to `param_dtype` when
  /// given (the precision's parameter dtype, as the Trainer cast the root), moved to its device, its parameters
  /// turned into plain tensors (sync() makes them copies of the root's). `strategy` names the caller in errors.
  /// Errors (volt::Error): make_replica() returns nullptr (the message says to override it or use ddp), returns
  /// this very module, or a module whose parameters, buffers or submodules differ from the root's by name,
  /// shape or dtype (the first mismatch is named).
  ModuleReplicas(TrainModule& root, Device root_device, const std::vector<Device>& devices,
                 std::optional<DType> param_dtype, const std::string& strategy);
  ModuleReplicas(const ModuleReplicas&) = delete;
  ModuleReplicas& operator=(const ModuleReplicas&) = delete;

  /// Replicas besides the root.
  int size() const { return static_cast<int>(replicas_.size()); }
  Device device(int r) const { return r == 0 ? root_device_ : devices_[static_cast<size_t>(r - 1)]; }
  /// Replica r's module: the root for r = 0.
  TrainModule& module(int r) { return r == 0 ? root_ : *replicas_[static_cast<size_t>(r - 1)]; }

  /// Called on replica r's thread (r >= 1), with its device current and its grad mode, before its step: copies
  /// the root's parameters and buffers into replica r (Tensor::copy_, cross-device and stream-ordered), mirrors
  /// every submodule's training flag and the Trainer context, and under grad mode makes each parameter of the
  /// replica a non-leaf output of a "ReplicaBroadcast" node whose backward sends the gradient to the root
  /// parameter (on the root's device). Frozen root parameters stay plain copies.
  void sync(int r);

 private:
  TrainModule& root_;
  Device root_device_;
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<TrainModule>> replicas_;
  nn::StateDict root_params_, root_buffers_;                      ///< the root's, in named_parameters order
  std::vector<nn::StateDict> params_, buffers_;                   ///< per replica, same order
  std::vector<nn::Module*> root_modules_;                         ///< named_modules order
  std::vector<std::vector<nn::Module*>> modules_;                 ///< per replica
};

}  // namespace volt::detail
