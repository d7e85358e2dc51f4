#include <volt/distributed/flight_recorder.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <volt/runtime/process.h>

namespace volt::dist {

struct FlightRecorder::Slot {
  std::atomic<int64_t> pid;
  std::atomic<uint64_t> seq;
  char op[48];
};

namespace {

std::string host_key(const std::string& host) { return std::to_string(std::hash<std::string>{}(host) % 1000000007); }

// Tables of this host's jobs whose rank 0 (on this host) is gone: a killed job never unlinks its own.
void remove_stale_tables(const std::string& host) {
  std::error_code ec;
  const std::string prefix = "volt-fr-" + host_key(host) + "-";
  for (std::filesystem::directory_iterator it("/dev/shm", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(prefix, 0) != 0) continue;
    const int64_t pid = std::atoll(n.c_str() + prefix.size());
    if (pid > 0 && !process_running(pid)) ::shm_unlink(("/" + n).c_str());
  }
}

}  // namespace

FlightRecorder::Slot* FlightRecorder::slots() const { return static_cast<Slot*>(map_); }

std::unique_ptr<FlightRecorder> FlightRecorder::open(const std::string& tag, int64_t rank0_pid,
                                                     const std::string& rank0_host, int world_size, int rank,
                                                     bool unlink_on_close) {
  if (world_size < 2 || rank < 0 || rank >= world_size) return nullptr;
  char me[256] = {};
  if (::gethostname(me, sizeof(me) - 1) == 0 && rank0_host == me) remove_stale_tables(me);
  std::unique_ptr<FlightRecorder> fr(new FlightRecorder());
  fr->name_ = "/volt-fr-" + host_key(rank0_host) + "-" + std::to_string(rank0_pid) + "-" + tag + "-w" +
              std::to_string(world_size);
  fr->world_ = world_size;
  fr->rank_ = rank;
  fr->unlink_ = unlink_on_close;
  fr->bytes_ = sizeof(Slot) * static_cast<size_t>(world_size);
  const int fd = ::shm_open(fr->name_.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  struct stat st {};
  // Every rank sizes it the same; a fresh table is zeros (no rank has entered a collective yet).
  if (::fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) < fr->bytes_ &&
                                ::ftruncate(fd, static_cast<off_t>(fr->bytes_)) != 0)) {
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, fr->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  fr->map_ = p;
  Slot& mine = fr->slots()[rank];
  mine.seq.store(0, std::memory_order_relaxed);
  mine.pid.store(::getpid(), std::memory_order_release);
  return fr;
}

FlightRecorder::~FlightRecorder() {
  if (map_) ::munmap(map_, bytes_);
  if (unlink_) ::shm_unlink(name_.c_str());
}

void FlightRecorder::record(uint64_t seq, const std::string& op) {
  Slot& s = slots()[rank_];
  const size_t n = std::min(op.size(), sizeof(s.op) - 1);
  std::memcpy(s.op, op.data(), n);
  s.op[n] = '\0';
  s.seq.store(seq, std::memory_order_release);
}

std::optional<FlightRecorder::Entry> FlightRecorder::read(int rank) const {
  if (rank < 0 || rank >= world_) return std::nullopt;
  const Slot& s = slots()[rank];
  Entry e;
  e.pid = s.pid.load(std::memory_order_acquire);
  if (e.pid == 0) return std::nullopt;
  e.seq = s.seq.load(std::memory_order_acquire);
  char op[sizeof(s.op) + 1] = {};
  std::memcpy(op, s.op, sizeof(s.op));
  e.op = e.seq ? op : "";
  return e;
}

char FlightRecorder::process_state(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return '?';
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

std::string FlightRecorder::report(int rank, uint64_t seq, const std::vector<std::string>& hosts) const {
  std::ostringstream last, behind;
  int n_behind = 0;
  for (int r = 0; r < world_; ++r) {
    const auto e = read(r);
    if (!e) continue;
    const char state = process_state(e->pid);
    const char* what = state == 'T' || state == 't' ? ", process stopped"
                       : state == 'Z' || !process_running(e->pid) ? ", process exited"
                                                                  : "";
    last << (last.tellp() > 0 ? "; " : "") << "rank " << r << " ";
    if (e->seq) last << "#" << e->seq << " " << e->op;
    else last << "none yet";
    last << what;
    if (r != rank && e->seq < seq) {
      const std::string host = r < static_cast<int>(hosts.size()) ? hosts[r] : "?";
      behind << (n_behind++ ? ", " : "") << "rank " << r << " (pid " << e->pid << " on " << host << what
             << ") whose last collective is "
             << (e->seq ? "#" + std::to_string(e->seq) + " " + e->op : std::string("none"));
    }
  }
  std::ostringstream os;
  if (n_behind) os << "Stuck: " << behind.str() << "; this rank waits in #" << seq << ". ";
  os << "Last collective entered by each rank on this host (flight recorder): " << last.str() << ".";
  return os.str();
}

}  // namespace volt::dist
