#include <volt/trainer/callbacks/async_checkpointing.h>

#include <chrono>
#include <exception>

#include <volt/kernels/tensor.h>
#include <volt/runtime/error.h>
#include <volt/trainer/collectives.h>
#include <volt/trainer/trainer.h>

namespace volt {

AsyncCheckpointing::AsyncCheckpointing() : worker_([this] { run(); }) {}

AsyncCheckpointing::~AsyncCheckpointing() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();  // the write in flight finishes first
}

void AsyncCheckpointing::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_; });
    if (!job_) return;  // stopping and idle
    std::function<void(const nn::StateDict&)> job = std::move(job_);
    nn::StateDict tensors = std::move(job_tensors_);
    const std::string stem = job_stem_;
    lock.unlock();
    std::string error;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      job(tensors);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    job_ = nullptr;
    spare_ = std::move(tensors);
    busy_ = false;
    ++done_;
    last_seconds_ = seconds;
    if (!error.empty()) error_ = "AsyncCheckpointing: the background write of checkpoint " + stem + " failed: " + error;
    cv_.notify_all();
  }
}

nn::StateDict AsyncCheckpointing::snapshot(const nn::StateDict& state) {
  nn::StateDict spare;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    spare.swap(spare_);
  }
  nn::StateDict out;
  out.reserve(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& [name, t] = state[i];
    const Tensor src = t.detach();
    if (i < spare.size() && spare[i].first == name && spare[i].second.shape() == src.shape() &&
        spare[i].second.dtype() == src.dtype()) {
      Tensor buffer = spare[i].second;
      buffer.copy_(src);
      out.emplace_back(name, std::move(buffer));
    } else {
      out.emplace_back(name, src.is_cuda() ? src.to(kCPU) : src.clone());
    }
  }
  return out;
}

void AsyncCheckpointing::finish(Collectives& c) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    spare_.clear();
  }
  settle(c);
}

void AsyncCheckpointing::submit(const std::string& stem, nn::StateDict tensors,
                                std::function<void(const nn::StateDict&)> write) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });  // at most one in flight (settle already waited; this is the guard)
  job_ = std::move(write);
  job_tensors_ = std::move(tensors);
  job_stem_ = stem;
  busy_ = true;
  cv_.notify_all();
}

void AsyncCheckpointing::settle(Collectives& c) {
  if (!queued_) return;
  queued_ = false;
  std::string error;
  if (c.is_global_zero()) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    error.swap(error_);
  }
  error = c.broadcast_string(error, 0);
  VOLT_CHECK(error.empty(), error);
}

void AsyncCheckpointing::on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const Batch&, int64_t) {
  if (!queued_) return;
  Collectives& c = trainer.strategy();
  double done = 0;
  if (c.is_global_zero()) {
    std::lock_guard<std::mutex> lock(mu_);
    done = busy_ ? 0 : 1;
  }
  if (c.broadcast_value(done, 0) != 0) settle(c);  // finished: raise its failure now, on every rank
}

int64_t AsyncCheckpointing::writes_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

double AsyncCheckpointing::last_write_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_seconds_;
}

}  // namespace volt
