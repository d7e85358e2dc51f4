#include <volt/data/data_loader.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <volt/runtime/cuda_api.h>

namespace volt::data {

namespace {

int64_t batches_for(int64_t n, int64_t bs, bool drop_last) { return drop_last ? n / bs : (n + bs - 1) / bs; }

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5bbull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rethrows the exception being handled as a volt::Error "DataLoader: <where>: <what>" with it nested.
[[noreturn]] void rethrow_in(const std::string& where) {
  std::string what = "unknown exception";
  try {
    throw;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::throw_with_nested(Error("DataLoader: " + where + ": " + what));
}

}  // namespace

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
}

// What turns batch k of a pass into a Batch; shared read-only by the loader and its workers.
struct DataLoader::Assembler {
  std::shared_ptr<const Dataset> dataset;
  int64_t batch_size = 1;
  bool pinned = false;
  uint64_t seed = 0;
  CollateFn collate;
  SampleTransform transform;

  Batch operator()(const std::vector<int64_t>& order, int64_t batch, int64_t epoch) const {
    const int64_t n = static_cast<int64_t>(order.size());
    const int64_t lo = batch * batch_size, hi = std::min(n, lo + batch_size);
    std::vector<int64_t> idx(order.begin() + lo, order.begin() + hi);
    if (!collate && !transform) return pinned ? dataset->get_batch_pinned(idx) : dataset->get_batch(idx);
    const std::string at = "batch " + std::to_string(batch) + " of epoch " + std::to_string(epoch);
    std::vector<Batch> samples;
    samples.reserve(idx.size());
    for (int64_t i : idx) {
      Batch s;
      try {
        s = dataset->get(i);
      } catch (...) {
        rethrow_in("dataset.get(" + std::to_string(i) + ") for " + at);
      }
      if (transform) {
        Generator gen(sample_seed(seed, epoch, i));
        try {
          s = transform(std::move(s), gen);
        } catch (...) {
          rethrow_in("sample_transform on sample " + std::to_string(i) + " (" + at + ")");
        }
      }
      samples.push_back(std::move(s));
    }
    try {
      if (!collate) return default_collate(samples, pinned);
      Batch b = collate(samples);
      return pinned ? pinned_copy(b) : b;
    } catch (...) {
      rethrow_in(std::string(collate ? "collate" : "default_collate") + " failed for " + at);
    }
  }
};

// The worker pool. Every field below `mu` is guarded by it. A pass is identified by `generation`; a batch a
// worker finishes after its pass was closed is discarded.
struct DataLoader::Workers {
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  std::shared_ptr<const Assembler> assemble;
  int64_t max_outstanding = 2;

  std::mutex mu;
  std::condition_variable work_cv;   // workers wait for work (or stop)
  std::condition_variable ready_cv;  // the consumer waits for its next batch
  bool stop = false;
  bool open = false;                 // a pass is running
  uint64_t generation = 0;
  std::shared_ptr<const std::vector<int64_t>> order;
  int64_t epoch = 0;                 // of the pass
  int64_t end = 0;                   // batches of the pass
  int64_t next = 0;                  // next batch to hand to a worker
  int64_t consumed = 0;              // next batch the consumer takes
  std::map<int64_t, Slot> ready;
  std::vector<std::thread> threads;

  void run() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      work_cv.wait(lk, [&] { return stop || (open && next < end && next < consumed + max_outstanding); });
      if (stop) return;
      const int64_t b = next++;
      const uint64_t gen = generation;
      const int64_t ep = epoch;
      auto ord = order;
      lk.unlock();
      Slot slot;
      try {
        slot.batch = (*assemble)(*ord, b, ep);
      } catch (...) {
        slot.error = std::current_exception();
      }
      lk.lock();
      if (gen == generation && open) {
        ready.emplace(b, std::move(slot));
        ready_cv.notify_all();
      }
    }
  }

  void spawn(int n) {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = false;
    }
    for (int i = 0; i < n; ++i) threads.emplace_back([this] { run(); });
  }

  void join() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    work_cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  void open_pass(std::shared_ptr<const std::vector<int64_t>> ord, int64_t ep, int64_t first, int64_t num) {
    {
      std::lock_guard<std::mutex> lk(mu);
      ++generation;
      open = true;
      order = std::move(ord);
      epoch = ep;
      next = consumed = first;
      end = num;
      ready.clear();
    }
    work_cv.notify_all();
  }

  void close_pass() {
    std::lock_guard<std::mutex> lk(mu);
    ++generation;
    open = false;
    order.reset();
    ready.clear();
  }

  Slot take() {
    std::unique_lock<std::mutex> lk(mu);
    ready_cv.wait(lk, [&] { return ready.count(consumed) > 0; });
    auto it = ready.find(consumed);
    Slot s = std::move(it->second);
    ready.erase(it);
    ++consumed;
    lk.unlock();
    work_cv.notify_all();  // one more batch may now be started
    return s;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  VOLT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  VOLT_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  VOLT_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  VOLT_CHECK(options_.prefetch_factor >= 1, "DataLoader: prefetch_factor must be >= 1, got ",
             options_.prefetch_factor);
  if (options_.sampler) sampler_ = options_.sampler;
  else if (options_.shuffle) sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  else sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  pinned_ = options_.pin_memory && cuda_available();
  auto assembler = std::make_shared<Assembler>();
  assembler->dataset = dataset_;
  assembler->batch_size = options_.batch_size;
  assembler->pinned = pinned_;
  assembler->seed = options_.seed;
  assembler->collate = options_.collate;
  assembler->transform = options_.sample_transform;
  assemble_ = std::move(assembler);
  if (options_.num_workers > 0) {
    workers_ = std::make_unique<Workers>();
    workers_->assemble = assemble_;
    workers_->max_outstanding = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
  }
}

DataLoader::~DataLoader() {
  if (workers_) workers_->join();
}

int64_t DataLoader::size() const { return batches_for(sampler_->size(), options_.batch_size, options_.drop_last); }

void DataLoader::start_pass() {
  end_pass();
  epoch_ = next_epoch_;
  const int64_t start = next_start_;
  next_epoch_ = epoch_ + 1;
  next_start_ = 0;
  sampler_->set_epoch(epoch_);
  auto order = std::make_shared<std::vector<int64_t>>(sampler_->indices());
  VOLT_CHECK(static_cast<int64_t>(order->size()) == sampler_->size(), "DataLoader: the sampler returned ",
             order->size(), " indices but reports size() ", sampler_->size());
  order_ = std::move(order);
  num_batches_ = batches_for(static_cast<int64_t>(order_->size()), options_.batch_size, options_.drop_last);
  VOLT_CHECK(start >= 0 && start <= num_batches_, "DataLoader: cannot resume epoch ", epoch_, " at batch ", start,
             "; an epoch has ", num_batches_, " batches");
  consumed_ = start;
  active_ = true;
  if (workers_) {
    if (workers_->threads.empty()) workers_->spawn(options_.num_workers);
    workers_->open_pass(order_, epoch_, start, num_batches_);
  }
}

void DataLoader::end_pass() {
  if (!active_) return;
  active_ = false;
  if (workers_) {
    workers_->close_pass();
    if (!options_.persistent_workers) workers_->join();
  }
  order_.reset();
}

std::optional<Batch> DataLoader::next() {
  if (!active_) start_pass();
  if (consumed_ >= num_batches_) {
    end_pass();
    return std::nullopt;
  }
  if (!workers_) {
    Batch b;
    try {
      b = (*assemble_)(*order_, consumed_, epoch_);
    } catch (...) {
      end_pass();
      throw;
    }
    ++consumed_;
    return b;
  }
  Workers::Slot s = workers_->take();
  ++consumed_;
  if (s.error) {
    end_pass();
    std::rethrow_exception(s.error);
  }
  return std::move(s.batch);
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_ = loader_->next();
  if (!current_) loader_ = nullptr;
  return *this;
}

DataLoader::Iterator DataLoader::begin() {
  start_pass();
  Iterator it;
  it.loader_ = this;
  it.current_ = next();
  if (!it.current_) it.loader_ = nullptr;
  return it;
}

void DataLoader::set_epoch(int64_t epoch) {
  end_pass();
  next_epoch_ = epoch;
  next_start_ = 0;
}

int64_t DataLoader::epoch() const { return active_ ? epoch_ : next_epoch_; }

LoaderState DataLoader::state() const {
  if (active_ && consumed_ < num_batches_) return {epoch_, consumed_};
  return {next_epoch_, next_start_};
}

void DataLoader::load_state(const LoaderState& state) {
  VOLT_CHECK(state.epoch >= 0 && state.batches_consumed >= 0 && state.batches_consumed <= size(),
             "DataLoader::load_state: position {epoch ", state.epoch, ", batches_consumed ", state.batches_consumed,
             "} is invalid for a loader of ", size(), " batches per epoch");
  end_pass();
  next_epoch_ = state.epoch;
  next_start_ = state.batches_consumed;
}

void DataLoader::set_sampler(std::shared_ptr<Sampler> sampler) {
  VOLT_CHECK(sampler != nullptr, "DataLoader::set_sampler: sampler is null");
  end_pass();
  sampler_ = std::move(sampler);
  options_.sampler = sampler_;
}

void DataLoader::reset() { end_pass(); }

}  // namespace volt::data
