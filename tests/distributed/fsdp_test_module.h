#pragma once
// The model of the FSDP tests (test_fsdp.cpp and the resume driver): an f64 regressor built from layers whose
// calls go through nn::Module::call_scoped, so that submodules can be FSDP units.
//   encoder (FsdpBlock: a 3->6, tanh, b 6->4; 24 + 28 values), shared (Linear 4->4, 20 values, called TWICE per
//   forward), head (Linear 4->1, 5 values), skip (3 values, a parameter of the root module).
// Two Adam parameter groups: {encoder, shared} and {head, skip}. The test wrap policy
// (fsdp_wrap={"shared"}, fsdp_min_num_params=25) makes encoder.b an auto-wrapped unit, shared an explicitly
// wrapped one used twice, and leaves encoder.a, head and skip to the root unit.
#include <memory>
#include <string>
#include <vector>

#include <volt/kernels/ops.h>
#include <volt/nn/nn.h>
#include <volt/trainer/trainer.h>

namespace volt::test {

struct FsdpBlock : nn::UnaryModule {
  nn::Linear a{3, 6}, b{6, 4};
  FsdpBlock() {
    register_module("a", a);
    register_module("b", b);
  }
  std::string type_name() const override { return "FsdpBlock"; }
  Tensor forward(const Tensor& x) override { return b(a(x).tanh()); }
};

struct FsdpNet : TrainModule {
  Tensor skip;  // (3)
  FsdpBlock encoder;
  nn::Linear shared{4, 4}, head{4, 1};
  bool adamw = false;
  std::vector<std::string> wrap_hook;  // returned by fsdp_wrap_modules()
  FsdpNet() {
    skip = register_parameter("skip", zeros({3}));
    register_module("encoder", encoder);
    register_module("shared", shared);
    register_module("head", head);
    to(DType::f64);
    NoGradGuard ng;
    uint64_t seed = 61;
    for (auto& [name, p] : named_parameters()) p.copy_((cast(rand_with_seed(p.shape(), seed++, 0), DType::f64) - 0.5) * 0.8);
  }
  std::string type_name() const override { return "FsdpNet"; }
  std::vector<std::string> fsdp_wrap_modules() const override { return wrap_hook; }
  Tensor forward_batch(const Tensor& x) {
    Tensor h = shared(shared(encoder(x)).tanh());
    return head(h).reshape({-1}) + (x * skip).sum({1});
  }
  Tensor training_step(const Batch& b, int64_t) override { return mse_loss(forward_batch(b.input), b.target); }
  void validation_step(const Batch& b, int64_t) override { log("val_loss", mse_loss(forward_batch(b.input), b.target), {.sync_dist = true}); }
  Tensor predict_step(const Batch& b, int64_t) override { return forward_batch(b.input); }
  Optimizers configure_optimizers() override {
    std::vector<Tensor> first, second;
    for (auto& [name, p] : named_parameters()) (name.rfind("head", 0) == 0 || name == "skip" ? second : first).push_back(p);
    std::vector<optim::ParamGroup> groups = {{first, 0.02, {}}, {second, 0.01, {}}};
    if (adamw) return std::make_shared<optim::AdamW>(groups, optim::AdamWOptions{.weight_decay = 0.1});
    return std::make_shared<optim::Adam>(groups, optim::AdamOptions{.weight_decay = 0.01});
  }
};

/// The units described above.
inline void fsdp_test_wrap(TrainerOptions& o) {
  o.fsdp_wrap = {"shared"};
  o.fsdp_min_num_params = 25;
}

}  // namespace volt::test
