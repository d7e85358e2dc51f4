#pragma once
/// @file
/// nn::Module: a tree of named parameters, buffers and child modules (PyTorch's nn.Module model).
///
/// Names are registration-ordered and dotted across the tree ("l1.weight"); DDP buckets, checkpoints
/// (state_dict) and optimizer state all key off them. A module is non-copyable and non-movable: children are
/// registered by reference (members of the parent) or by shared_ptr (owned by the parent).
///
/// Tensors are handles: a layer keeps its own copy of each registered tensor (e.g. `weight`) sharing the
/// TensorImpl stored here. to(Device)/to(DType) swap the data of that shared TensorImpl in place, so those
/// member copies, and optimizer references to them, stay valid.
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <volt/kernels/ops.h>
#include <volt/runtime/trace.h>

namespace volt::nn {

using StateDict = std::vector<std::pair<std::string, Tensor>>;
class Module;

/// Code run around every call of one module (Module::call_scoped): FSDP gathers a unit's parameters in
/// before_call and frees them in after_call. after_call is skipped when the call throws.
class CallHook {
 public:
  virtual ~CallHook() = default;
  virtual void before_call(Module& module) = 0;
  virtual void after_call(Module& module) = 0;
};

class Module {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Registers `t` as a parameter (a leaf that requires grad unless requires_grad is false) and returns the
  /// stored handle. Names must be non-empty, contain no '.', and be unique among this module's parameters,
  /// buffers and children.
  Tensor& register_parameter(std::string name, Tensor t, bool requires_grad = true);
  /// Registers state that is saved and moved with the module but not trained (e.g. running_mean).
  Tensor& register_buffer(std::string name, Tensor t);
  /// Registers a child that the caller owns (typically a member of the derived module).
  template <class M>
    requires std::is_base_of_v<Module, M>
  M& register_module(std::string name, M& child) {
    add_child(std::move(name), &child, nullptr);
    return child;
  }
  /// Registers a child owned by this module.
  template <class M>
    requires std::is_base_of_v<Module, M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    Module* raw = child.get();
    add_child(std::move(name), raw, child);
    return child;
  }

  /// Parameters of this module then of each child (pre-order), each tensor once even if shared.
  StateDict named_parameters(bool recurse = true) const;
  StateDict named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  /// This module (name "") and all descendants, pre-order, with dotted names.
  std::vector<std::pair<std::string, Module*>> named_modules();

  /// Training mode propagates to all descendants; layers such as Dropout and BatchNorm read is_training().
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves parameters (with their gradients) and buffers to `device`.
  void to(Device device);
  /// Casts floating-point parameters (with their gradients) and buffers to `dtype` (a floating type); integer
  /// buffers (num_batches_tracked) keep their dtype.
  void to(DType dtype);

  /// Clears (set_to_none) or zeroes the gradients of all parameters.
  void zero_grad(bool set_to_none = true);

  /// Parameters and buffers, per module (pre-order): its parameters then its buffers. The tensors are detached
  /// handles sharing the module's storage.
  StateDict state_dict() const;
  /// Copies values from `sd` into this module's parameters and buffers (casting dtype/device as needed).
  /// Throws volt::Error naming every mis-shaped key (with expected and got shapes), and when strict every
  /// missing and unexpected key; nothing is copied if it throws.
  void load_state_dict(const StateDict& sd, bool strict = true);

  /// The dotted name under the first parent this module was registered in ("encoder.l1"; "" for a root).
  std::string path_name() const;

  /// Runs f() as a call of this module: anomaly detection names the module an op ran in, and the trace
  /// (runtime/trace.h) shows the call as a range; the name is built only when one of them is on. UnaryModule's
  /// operator() uses it, as do layers whose call takes more than one tensor.
  template <class F>
  decltype(auto) call_scoped(F&& f) {
    auto name = [this] {
      std::string path = path_name();
      return (path.empty() ? std::string("<root>") : path) + " (" + type_name() + ")";
    };
    autograd::ScopeGuard scope(name);
    trace::ModuleRange range(name);
    CallHookScope hook(call_hook_, *this);
    return f();
  }

  /// Installs (or with nullptr removes) the hook run around this module's calls; the hook must outlive its
  /// installation. One hook per module: installing over another one is a volt::Error.
  void set_call_hook(CallHook* hook);
  CallHook* call_hook() const { return call_hook_; }

  virtual std::string type_name() const { return "Module"; }
  /// Short description of the configuration ("in_features=784, out_features=128") for summaries.
  virtual std::string extra_repr() const { return ""; }
  /// Multi-line tree printout in PyTorch's style.
  std::string repr() const;
  int64_t num_parameters(bool trainable_only = false) const;

 private:
  struct Child {
    std::string name;
    Module* module;
    std::shared_ptr<Module> owned;  ///< null when the caller owns the child
  };
  void add_child(std::string name, Module* child, std::shared_ptr<Module> owned);
  void check_new_name(const std::string& name, const char* what) const;
  template <class F> void visit(const std::string& prefix, F&& f) const;

  /// Runs the hook's after_call at scope exit unless the call threw; a null hook costs one test each way.
  class CallHookScope {
   public:
    CallHookScope(CallHook* hook, Module& m) : hook_(hook), module_(m) {
      if (hook_) {
        exceptions_ = std::uncaught_exceptions();
        hook_->before_call(module_);
      }
    }
    ~CallHookScope() noexcept(false) {
      if (hook_ && std::uncaught_exceptions() == exceptions_) hook_->after_call(module_);
    }
    CallHookScope(const CallHookScope&) = delete;
    CallHookScope& operator=(const CallHookScope&) = delete;

   private:
    CallHook* hook_;
    Module& module_;
    int exceptions_ = 0;
  };

  CallHook* call_hook_ = nullptr;
  std::deque<std::pair<std::string, Tensor>> params_;   ///< deque: returned references stay valid
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<Child> children_;
  const Module* parent_ = nullptr;  ///< the first module this one was registered in
  std::string name_in_parent_;
  bool training_ = true;
};

/// A module mapping one tensor to one tensor. Layers implement forward(); callers use operator().
class UnaryModule : public Module {
 public:
  Tensor operator()(const Tensor& x) {
    return call_scoped([&] { return forward(x); });
  }
  virtual Tensor forward(const Tensor& x) = 0;
};

}  // namespace volt::nn
