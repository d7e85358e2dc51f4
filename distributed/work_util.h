#pragma once
// Internal helpers shared by the process-group backends (not part of the public API).
#include <functional>
#include <memory>

#include <volt/distributed/process_group.h>

namespace volt::dist {

// A collective that completed when it was issued (single process, empty tensors).
class DoneWork : public Work {
 public:
  explicit DoneWork(CollectiveInfo info) { info_ = std::move(info); }
  bool is_completed() override { return true; }
  void wait() override {}
};

// Runs `then` once after `inner` completes (copy a contiguous buffer back, cast f32 back to f16, ...).
class ThenWork : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then) : inner_(std::move(inner)), then_(std::move(then)) {
    info_ = inner_->info();
  }
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    finish();
    return true;
  }
  void wait() override {
    inner_->wait();
    finish();
  }

 private:
  void finish() {
    if (then_) {
      auto f = std::move(then_);
      then_ = nullptr;
      f();
    }
  }
  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
};

namespace detail {
// Calls MPI_Finalize when Volt called MPI_Init (no-op without MPI).
void finalize_mpi_if_owned();
// Divides a contiguous floating CPU tensor by `d` in place (no autograd check: buffers owned by collectives).
void divide_inplace_cpu(Tensor& t, double d);
}  // namespace detail

}  // namespace volt::dist
