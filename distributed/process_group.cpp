#include <volt/distributed/process_group.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include <volt/distributed/flight_recorder.h>
#include <volt/distributed/peer_status.h>
#include <volt/distributed/work_util.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>
#include <volt/runtime/log.h>
#include <volt/runtime/process.h>
#include <volt/runtime/trace.h>

namespace volt::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

bool poll_until(const std::function<bool()>& done, double timeout_s) {
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::duration<double>(timeout_s);
  // Three phases. MPI's non-blocking collectives only progress inside MPI calls, so a rank that naps between
  // polls stalls its peers too (a 1 ms nap per gradient bucket cost a third of a DDP step):
  //  - the first 2 ms: poll flat out (a gradient all-reduce completes in ~0.1-1 ms);
  //  - up to 50 ms: poll with sched_yield, which hands the core to an oversubscribed peer;
  //  - then (a peer is genuinely late): naps of up to 1 ms, so a long wait does not burn a core.
  const auto spin_until = start + std::chrono::milliseconds(2);
  const auto yield_until = start + std::chrono::milliseconds(50);
  for (int naps = 0;;) {
    if (done()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    if (now < spin_until) continue;
    if (now < yield_until) {
      std::this_thread::yield();
    } else {
      int us = std::min(1000, 10 << std::min(naps++, 7));
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
  }
}

namespace {

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  VOLT_CHECK(end && *end == '\0' && d > 0, "environment variable ", name, "='", v,
             "' is not a positive number of seconds");
  return d;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  return s == "1" || s == "true" || s == "TRUE" || s == "on" || s == "ON" || s == "yes";
}

// Debug-mode record: fixed size so that it can be all-gathered without a size exchange.
constexpr int kMaxDims = 8;
constexpr int kRecordLen = 7 + kMaxDims;  // seq, op, dtype, ndim, root, uneven, numel, dims...
const char* const kOpNames[] = {"all_reduce", "broadcast", "all_gather", "all_gather_uneven",
                                "reduce_scatter", "barrier", "all_reduce_coalesced"};

int64_t op_code(const char* op) {
  for (int64_t i = 0; i < static_cast<int64_t>(std::size(kOpNames)); ++i)
    if (std::string(op) == kOpNames[i]) return i;
  return -1;
}

std::string describe_record(const int64_t* r) {
  std::ostringstream os;
  int64_t code = r[1];
  os << (code >= 0 && code < static_cast<int64_t>(std::size(kOpNames)) ? kOpNames[code] : "?") << " #" << r[0];
  if (r[3] >= 0) {
    os << " (dtype " << dtype_name(static_cast<DType>(r[2])) << ", shape (";
    for (int64_t d = 0; d < std::min<int64_t>(r[3], kMaxDims); ++d) os << (d ? ", " : "") << r[7 + d];
    if (r[3] > kMaxDims) os << ", ...";
    os << "))";
  }
  if (r[4] >= 0) os << " root " << r[4];
  return os.str();
}

bool records_match(const int64_t* a, const int64_t* b) {
  if (a[0] != b[0] || a[1] != b[1] || a[2] != b[2] || a[3] != b[3] || a[4] != b[4]) return false;
  if (a[5] != 0) return true;  // all_gather_uneven: any sizes (its own exchange checks dtype and ndim)
  if (a[6] != b[6]) return false;
  for (int d = 0; d < kMaxDims; ++d)
    if (a[7 + d] != b[7 + d]) return false;
  return true;
}

std::unique_ptr<ProcessGroup> g_default;

}  // namespace

ProcessGroup::ProcessGroup(int rank, int world_size, int local_rank, int local_world_size)
    : rank_(rank), world_size_(world_size), local_rank_(local_rank), local_world_size_(local_world_size) {
  timeout_s_ = env_double("VOLT_COLLECTIVE_TIMEOUT", 300.0);
  debug_ = env_flag("VOLT_DISTRIBUTED_DEBUG");
}

void ProcessGroup::set_timeout(double seconds) {
  VOLT_CHECK(seconds > 0, "ProcessGroup::set_timeout: seconds must be > 0, got ", seconds);
  timeout_s_ = seconds;
}

std::string ProcessGroup::timeout_message(const CollectiveInfo& info, double elapsed) {
  std::ostringstream os;
  os << "collective " << info.op << " (sequence #" << info.seq << ") timed out on rank " << rank_ << " of "
     << world_size_ << " after " << elapsed << " s (timeout " << timeout_s_
     << " s, VOLT_COLLECTIVE_TIMEOUT): likely not all ranks called it (e.g. a collective inside "
        "`if (rank == 0)`), ranks issued collectives in different orders, or a peer process exited or hung. "
     << peer_liveness_report() << (recorder_ ? " " + recorder_->report(rank_, info.seq, hosts()) : std::string())
     << " Set VOLT_DISTRIBUTED_DEBUG=1 to check every collective's op and shapes across ranks. The process "
        "group is now unusable: exit the process.";
  std::string msg = os.str();
  mark_broken(msg);
  return msg;
}

namespace {

constexpr int kHostWords = 8;  // host names up to 63 characters travel in the identity record

std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace

std::vector<int64_t> ProcessGroup::identity_record() {
  std::vector<int64_t> rec(1 + kHostWords, 0);
  rec[0] = static_cast<int64_t>(::getpid());
  std::string host = this_host().substr(0, kHostWords * 8 - 1);
  std::memcpy(rec.data() + 1, host.data(), host.size());
  return rec;
}

std::vector<ProcessGroup::PeerIdentity> ProcessGroup::decode_identities(const std::vector<int64_t>& all,
                                                                        int world_size) {
  const size_t len = 1 + kHostWords;
  VOLT_ASSERT(all.size() == len * static_cast<size_t>(world_size), "decode_identities: bad record size");
  std::vector<PeerIdentity> peers(world_size);
  for (int r = 0; r < world_size; ++r) {
    const int64_t* rec = all.data() + len * r;
    char host[kHostWords * 8 + 1] = {};
    std::memcpy(host, rec + 1, kHostWords * 8);
    peers[r] = {rec[0], host};
  }
  return peers;
}

void ProcessGroup::set_peers(std::vector<PeerIdentity> peers) {
  peers_ = std::move(peers);
  static std::atomic<int> groups{0};  // every rank makes its groups in the same order
  const int index = groups.fetch_add(1);
  if (world_size_ < 2 || peers_.size() != static_cast<size_t>(world_size_)) return;
  const std::string me = this_host();
  int lowest_here = -1;  // removes this host's table when its group goes
  for (int r = 0; r < world_size_ && lowest_here < 0; ++r)
    if (peers_[r].host == me) lowest_here = r;
  recorder_ = FlightRecorder::open(backend_name() + std::to_string(index), peers_[0].pid, peers_[0].host,
                                   world_size_, rank_, lowest_here == rank_);
  detail::remember_flight_recorder(this, recorder_);  // peer_status.h: who is stopped, asked from a signal watcher
}

std::vector<std::string> ProcessGroup::hosts() const {
  std::vector<std::string> out;
  for (const auto& p : peers_) out.push_back(p.host);
  return out;
}

std::vector<std::string> ProcessGroup::missing_peers() const {
  std::vector<std::string> gone;
  if (peers_.size() != static_cast<size_t>(world_size_)) return gone;
  const std::string me = this_host();
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_ && peers_[r].host == me && !process_running(peers_[r].pid))
      gone.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(peers_[r].pid) + " on " + me + ")");
  return gone;
}

std::string ProcessGroup::peer_liveness_report() const {
  if (peers_.size() != static_cast<size_t>(world_size_)) return "";
  const std::string me = this_host();
  const std::vector<std::string> gone = missing_peers();
  std::vector<int> unchecked;
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_ && peers_[r].host != me) unchecked.push_back(r);
  std::ostringstream os;
  if (!gone.empty()) {
    os << "Missing: ";
    for (size_t i = 0; i < gone.size(); ++i) os << (i ? ", " : "") << gone[i];
    os << (gone.size() == 1 ? " has" : " have") << " exited.";
  } else {
    os << "Every rank on this host (" << me << ") is still running.";
  }
  if (!unchecked.empty()) {
    os << " Ranks on other hosts were not checked:";
    for (int r : unchecked) os << " " << r << " (" << peers_[r].host << ")";
    os << ".";
  }
  return os.str();
}

void ProcessGroup::check_usable(const char* op, const Tensor& t) const {
  VOLT_CHECK(t.defined(), "ProcessGroup::", op, ": tensor is undefined");
  VOLT_CHECK(supports_device(t.device()), "ProcessGroup::", op, ": the ", backend_name(),
             " backend cannot communicate a tensor on ", t.device().str(),
             " (mpi takes CPU tensors, nccl takes CUDA tensors)");
}

CollectiveInfo ProcessGroup::begin(const char* op, const Tensor* t, int root, bool uneven) {
  VOLT_CHECK(broken_reason_.empty(), "ProcessGroup::", op, ": the process group is broken by an earlier error: ",
             broken_reason_);
  if (root >= 0 || std::string(op) == "broadcast")
    VOLT_CHECK(root >= 0 && root < world_size_, "ProcessGroup::", op, ": root ", root,
               " is not a rank of a group of world size ", world_size_);
  CollectiveInfo info{op, ++seq_};
  if (recorder_) recorder_->record(info.seq, info.op);
  if (!debug_ || world_size_ == 1) return info;
  std::vector<int64_t> rec(kRecordLen, 0);
  rec[0] = static_cast<int64_t>(info.seq);
  rec[1] = op_code(op);
  rec[2] = t ? static_cast<int64_t>(t->dtype()) : -1;
  rec[3] = t ? t->dim() : -1;
  rec[4] = root;
  rec[5] = uneven ? 1 : 0;
  rec[6] = t ? t->numel() : 0;
  if (t)
    for (int64_t d = 0; d < std::min<int64_t>(t->dim(), kMaxDims); ++d) rec[7 + d] = t->size(d);
  CollectiveInfo check{std::string(op) + " (debug check)", info.seq};
  std::vector<int64_t> all = exchange_records(rec, check);
  bool ok = true;
  for (int r = 1; r < world_size_; ++r) ok = ok && records_match(&all[0], &all[r * kRecordLen]);
  if (!ok) {
    std::ostringstream os;
    os << "collective mismatch detected by VOLT_DISTRIBUTED_DEBUG at " << op << " (sequence #" << info.seq
       << "): ranks called different collectives or with different dtypes/shapes";
    if (uneven) os << " (all_gather_uneven needs equal dtypes and numbers of dimensions)";
    os << ":";
    for (int r = 0; r < world_size_; ++r) os << " rank " << r << " called " << describe_record(&all[r * kRecordLen]) << ";";
    VOLT_FAIL(os.str());
  }
  return info;
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  trace::Range range(trace::Layer::comm, "all_reduce", {t.device(), t.nbytes()});
  start_all_reduce(t, op)->wait();
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(Tensor& t, ReduceOp op) {
  trace::Range range(trace::Layer::comm, "all_reduce_async", {t.device(), t.nbytes()});
  return start_all_reduce(t, op);
}

std::shared_ptr<Work> ProcessGroup::start_all_reduce(Tensor& t, ReduceOp op) {
  check_usable("all_reduce", t);
  VOLT_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "ProcessGroup::all_reduce: ReduceOp avg needs a ",
             "floating tensor, got dtype ", dtype_name(t.dtype()), " (use sum and divide)");
  CollectiveInfo info = begin("all_reduce", &t);
  if (t.is_contiguous()) return all_reduce_impl(t, op, info);
  Tensor buf = t.contiguous();
  auto inner = all_reduce_impl(buf, op, info);
  Tensor target = t;
  return std::make_shared<ThenWork>(inner, [buf, target]() mutable {
    NoGradGuard g;
    target.copy_(buf);
  });
}

void ProcessGroup::all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op) {
  uint64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += t.defined() ? static_cast<uint64_t>(t.nbytes()) : 0;
  trace::Range range(trace::Layer::comm, "all_reduce_coalesced", {tensors.empty() ? kCPU : tensors[0].device(), bytes});
  if (tensors.empty()) return;
  DType dt = tensors[0].dtype();
  Device dev = tensors[0].device();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_usable("all_reduce_coalesced", tensors[i]);
    VOLT_CHECK(tensors[i].device() == dev, "ProcessGroup::all_reduce_coalesced: tensor ", i, " is on ",
               tensors[i].device().str(), " but tensor 0 is on ", dev.str(), "; all must share one device");
    if (tensors[i].dtype() != dt) dt = DType::f64;
    total += tensors[i].numel();
  }
  VOLT_CHECK(op != ReduceOp::Avg || is_floating(dt), "ProcessGroup::all_reduce_coalesced: ReduceOp avg needs ",
             "floating tensors, got dtype ", dtype_name(dt));
  NoGradGuard g;
  Tensor flat = empty({total}, dt, dev);
  int64_t off = 0;
  for (auto& t : tensors) {
    if (t.numel()) flat.narrow(0, off, t.numel()).copy_(t.reshape({t.numel()}));
    off += t.numel();
  }
  CollectiveInfo info = begin("all_reduce_coalesced", &flat);
  all_reduce_impl(flat, op, info)->wait();
  off = 0;
  for (auto& t : tensors) {
    if (t.numel()) t.copy_(flat.narrow(0, off, t.numel()).view(t.shape()));
    off += t.numel();
  }
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  trace::Range range(trace::Layer::comm, "broadcast", {t.device(), t.nbytes()});
  check_usable("broadcast", t);
  CollectiveInfo info = begin("broadcast", &t, root);
  if (t.is_contiguous()) {
    broadcast_impl(t, root, info)->wait();
    return;
  }
  Tensor buf = t.contiguous();
  broadcast_impl(buf, root, info)->wait();
  NoGradGuard g;
  t.copy_(buf);
}

std::vector<Shape> ProcessGroup::exchange_shapes(const char* op, const Tensor& t, bool any_shape,
                                                 const CollectiveInfo& info) {
  if (world_size_ == 1) return {t.shape()};
  // (dtype, ndim, product of the dims past kMaxDims, dims 0..kMaxDims-1): dims past kMaxDims compare by their
  // product only; any_shape lets the first kMaxDims differ, so those must match exactly.
  constexpr int kLen = 3 + kMaxDims;
  std::vector<int64_t> rec(kLen, 0);
  rec[0] = static_cast<int64_t>(t.dtype());
  rec[1] = t.dim();
  rec[2] = 1;
  for (int64_t d = kMaxDims; d < t.dim(); ++d) rec[2] *= t.size(d);
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMaxDims); ++d) rec[3 + d] = t.size(d);
  std::vector<int64_t> all = exchange_records(rec, info);
  bool same = true;
  for (int r = 1; r < world_size_ && same; ++r) {
    const int64_t* a = &all[0];
    const int64_t* b = &all[static_cast<size_t>(r) * kLen];
    same = a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
    for (int d = 0; d < kMaxDims && same && !any_shape; ++d) same = a[3 + d] == b[3 + d];
  }
  if (!same) {
    std::ostringstream os;
    os << "ProcessGroup::" << op << " (sequence #" << info.seq << "): ranks passed tensors of different "
       << (any_shape ? "dtypes or numbers of dimensions" : "dtypes or shapes") << ":";
    for (int r = 0; r < world_size_; ++r) {
      const int64_t* x = &all[static_cast<size_t>(r) * kLen];
      os << " rank " << r << " " << dtype_name(static_cast<DType>(x[0])) << " (";
      for (int64_t d = 0; d < std::min<int64_t>(x[1], kMaxDims); ++d) os << (d ? ", " : "") << x[3 + d];
      os << (x[1] > kMaxDims ? ", ...)" : ")") << ";";
    }
    os << (any_shape ? " expected the same dtype and number of dimensions on every rank (the sizes may differ"
                       " in any of the first " + std::to_string(kMaxDims) + ")"
                     : " expected the same dtype and shape on every rank (all_gather_uneven allows different "
                       "sizes)");
    VOLT_FAIL(os.str());
  }
  std::vector<Shape> shapes(static_cast<size_t>(world_size_), t.shape());
  for (int r = 0; r < world_size_; ++r)
    for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMaxDims); ++d)
      shapes[static_cast<size_t>(r)][static_cast<size_t>(d)] = all[static_cast<size_t>(r) * kLen + 3 + d];
  return shapes;
}

Tensor ProcessGroup::all_gather(const Tensor& t) {
  trace::Range range(trace::Layer::comm, "all_gather", {t.device(), t.nbytes()});
  check_usable("all_gather", t);
  CollectiveInfo info = begin("all_gather", &t);
  // Debug mode already compared the shapes in begin(); otherwise a cheap host-side exchange does, so that
  // mismatched counts never reach MPI/NCCL (which would corrupt memory or hang).
  if (!debug_) exchange_shapes("all_gather", t, /*any_shape=*/false, info);
  return gather_stacked(t.contiguous(), info);
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_async(const Tensor& in, Tensor& out) {
  trace::Range range(trace::Layer::comm, "all_gather_into_async", {in.device(), in.nbytes()});
  check_usable("all_gather", in);
  VOLT_CHECK(in.dim() == 1 && in.is_contiguous(), "ProcessGroup::all_gather_into_async: the input must be a "
             "contiguous 1-D tensor, got ", in.shape_str());
  VOLT_CHECK(out.defined() && out.dim() == 1 && out.size(0) == in.size(0) * world_size_ && out.is_contiguous() &&
                 out.dtype() == in.dtype() && out.device() == in.device(),
             "ProcessGroup::all_gather_into_async: the output must be a contiguous (", in.size(0) * world_size_,
             ",) ", dtype_name(in.dtype()), " tensor on ", in.device().str(), ", got ",
             out.defined() ? out.shape_str() + " " + dtype_name(out.dtype()) + " on " + out.device().str()
                           : std::string("an undefined tensor"));
  CollectiveInfo info = begin("all_gather", &in);
  Tensor stacked = out.view({world_size_, in.size(0)});
  return all_gather_impl(in, stacked, info);
}

Tensor ProcessGroup::all_gather_with_grad(const Tensor& t) {
  Tensor out = all_gather(t.detach());
  if (autograd::any_requires_grad({&t})) {
    const int me = rank_;
    autograd::attach(out, "AllGatherBackward", {t}, [this, me](const std::vector<Tensor>& g) {
      // Each rank's loss may use every rank's slice: the gradient of this rank's input is the sum over ranks
      // of what reached its row.
      Tensor total = g[0].contiguous().clone();
      all_reduce(total, ReduceOp::Sum);
      return std::vector<Tensor>{total.select(0, me)};
    });
  }
  return out;
}

Tensor ProcessGroup::gather_stacked(const Tensor& in, const CollectiveInfo& info) {
  Shape s = in.shape();
  s.insert(s.begin(), world_size_);
  Tensor out = empty(s, in.dtype(), in.device());
  all_gather_impl(in, out, info)->wait();
  return out;
}

std::vector<Tensor> ProcessGroup::all_gather_uneven(const Tensor& t) {
  trace::Range range(trace::Layer::comm, "all_gather_uneven", {t.device(), t.nbytes()});
  check_usable("all_gather_uneven", t);
  std::vector<Tensor> parts;
  if (t.dim() == 0) {
    Tensor all = all_gather(t);
    for (int r = 0; r < world_size_; ++r) parts.push_back(all.select(0, r));
    return parts;
  }
  CollectiveInfo info = begin("all_gather_uneven", &t, -1, /*uneven=*/true);
  // One exchange gives every rank's full shape and checks the dtype and rank count of dims on every rank; each
  // rank then pads to the largest size in every dimension, so one fixed-size gather carries any shapes.
  const std::vector<Shape> shapes = exchange_shapes("all_gather_uneven", t, /*any_shape=*/true, info);
  Shape max_shape = t.shape();
  for (const Shape& s : shapes)
    for (size_t d = 0; d < s.size(); ++d) max_shape[d] = std::max(max_shape[d], s[d]);
  Tensor padded = t.contiguous();
  if (t.shape() != max_shape) {
    padded = zeros(max_shape, t.dtype(), t.device());
    NoGradGuard g;
    if (t.numel()) {
      Tensor region = padded;
      for (int64_t d = 0; d < t.dim(); ++d) region = region.narrow(d, 0, t.size(d));
      region.copy_(t);
    }
  }
  // The shapes were checked by the exchange above, so the data collective needs no second check.
  Tensor all = gather_stacked(padded, begin("all_gather", &padded));
  for (int r = 0; r < world_size_; ++r) {
    const Shape& shape = shapes[static_cast<size_t>(r)];
    Tensor part = all.select(0, r);
    for (int64_t d = 0; d < t.dim(); ++d) part = part.narrow(d, 0, shape[static_cast<size_t>(d)]);
    parts.push_back(part.is_contiguous() ? part : part.contiguous());
  }
  return parts;
}

Tensor ProcessGroup::all_gather_cat(const Tensor& t, std::vector<int64_t>* sizes) {
  VOLT_CHECK(t.defined() && t.dim() >= 1, "ProcessGroup::all_gather_cat: needs a tensor with at least one dim, got ",
             t.defined() ? t.shape_str() : "undefined");
  std::vector<Tensor> parts = all_gather_uneven(t);
  Shape s = t.shape();
  s[0] = 0;
  if (sizes) sizes->clear();
  for (size_t r = 0; r < parts.size(); ++r) {
    const Tensor& p = parts[r];
    // Every rank sees every shape, so every rank raises this together.
    VOLT_CHECK(Shape(p.shape().begin() + 1, p.shape().end()) == Shape(t.shape().begin() + 1, t.shape().end()),
               "ProcessGroup::all_gather_cat: rank ", r, " passed ", p.shape_str(), " but rank ", rank_, " passed ",
               t.shape_str(), "; concatenating along dim 0 needs equal dimensions after the first (use "
               "all_gather_uneven for any shapes)");
    s[0] += p.size(0);
    if (sizes) sizes->push_back(p.size(0));
  }
  Tensor out = empty(s, t.dtype(), t.device());
  NoGradGuard g;
  int64_t off = 0;
  for (auto& p : parts) {
    if (p.size(0)) out.narrow(0, off, p.size(0)).copy_(p);
    off += p.size(0);
  }
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& t, ReduceOp op) {
  trace::Range range(trace::Layer::comm, "reduce_scatter", {t.device(), t.nbytes()});
  Shape s = t.defined() ? t.shape() : Shape{};
  if (!s.empty()) s[0] /= world_size_;
  Tensor out = t.defined() ? empty(s, t.dtype(), t.device()) : Tensor();
  start_reduce_scatter(t, out, op)->wait();
  return out;
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& t, Tensor& out, ReduceOp op) {
  trace::Range range(trace::Layer::comm, "reduce_scatter_async", {t.device(), t.nbytes()});
  return start_reduce_scatter(t, out, op);
}

std::shared_ptr<Work> ProcessGroup::start_reduce_scatter(const Tensor& t, Tensor& out, ReduceOp op) {
  check_usable("reduce_scatter", t);
  VOLT_CHECK(t.dim() >= 1 && t.size(0) % world_size_ == 0, "ProcessGroup::reduce_scatter: input shape ",
             t.shape_str(), " must have a first dim divisible by the world size ", world_size_);
  VOLT_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), "ProcessGroup::reduce_scatter: ReduceOp avg needs a ",
             "floating tensor, got dtype ", dtype_name(t.dtype()));
  Shape s = t.shape();
  s[0] /= world_size_;
  VOLT_CHECK(out.defined() && out.shape() == s && out.dtype() == t.dtype() && out.device() == t.device() &&
                 out.is_contiguous(),
             "ProcessGroup::reduce_scatter_async: the output must be a contiguous ", dtype_name(t.dtype()),
             " tensor with first dim ", s[0], " and the input's trailing dims on ", t.device().str(), ", got ",
             out.defined() ? out.shape_str() + " " + dtype_name(out.dtype()) + " on " + out.device().str()
                           : std::string("an undefined tensor"));
  CollectiveInfo info = begin("reduce_scatter", &t);
  Tensor in = t.contiguous();
  return reduce_scatter_impl(in, out, op, info);
}

void ProcessGroup::barrier() {
  trace::Range range(trace::Layer::comm, "barrier");
  CollectiveInfo info = begin("barrier", nullptr);
  barrier_impl(info)->wait();
}

// ---- launch environment and the default group ------------------------------------------------------------

namespace {
bool env_int(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  VOLT_CHECK(end && *end == '\0' && x >= 0, "environment variable ", name, "='", v, "' is not a rank/size");
  *out = static_cast<int>(x);
  return true;
}
}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  struct Source { const char *name, *rank, *size, *local; };
  const Source sources[] = {
      {"OMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  for (const auto& s : sources) {
    int r, n;
    if (env_int(s.rank, &r) && env_int(s.size, &n)) {
      VOLT_CHECK(n >= 1 && r < n, "launch environment ", s.name, ": rank ", r, " is not below world size ", n);
      e.rank = r;
      e.world_size = n;
      if (!env_int(s.local, &e.local_rank)) e.local_rank = r;  // single node assumed without a local id
      e.source = s.name;
      return e;
    }
  }
  e.source = "none";
  return e;
}

void ProcessGroup::use_device(Device device) {
  VOLT_CHECK(supports_device(device), "ProcessGroup(", backend_name(), "): collectives cannot take tensors on ",
             device.str(), (device.is_cuda() ? "; GPU tensors need the nccl backend" : ""));
}

Device device_for_local_rank(int local_rank) {
  if (!cuda_available()) return kCPU;
  return cuda_device(local_rank % cuda_device_count());
}

ProcessGroup& init_process_group(const std::string& backend, double timeout_s) {
  VOLT_CHECK(!g_default, "init_process_group: a process group (", g_default->backend_name(),
             ") is already initialised; call finalize_process_group() first");
  std::string b = backend;
  if (b == "auto") {
    LaunchEnv env = detect_launch_env();
    b = env.world_size > 1 ? (cuda_available() ? "nccl" : "mpi") : "single";
  }
  if (b == "single") g_default = make_single_group();
  else if (b == "mpi") g_default = make_mpi_group();
  else if (b == "nccl") g_default = make_nccl_group();
  else VOLT_FAIL("init_process_group: backend '", backend, "' is not one of auto, mpi, nccl, single");
  if (timeout_s > 0) g_default->set_timeout(timeout_s);
  logging::set_rank(g_default->rank(), g_default->world_size());
  logging::debug("init_process_group: backend " + g_default->backend_name() + ", rank " +
                 std::to_string(g_default->rank()) + " of " + std::to_string(g_default->world_size()));
  return *g_default;
}

bool is_initialized() { return g_default != nullptr; }

ProcessGroup& default_group() {
  VOLT_CHECK(g_default, "default_group: no process group; call volt::dist::init_process_group() first");
  return *g_default;
}

void finalize_process_group() {
  if (g_default) g_default->shutdown();
  g_default.reset();
  logging::set_rank(0, 1);
  detail::finalize_mpi_if_owned();
}

}  // namespace volt::dist
