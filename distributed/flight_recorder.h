#pragma once
// Internal (not part of the public API): the side channel that names a stuck rank.
//
// When a collective times out, the waiting ranks know only that someone did not arrive. The stuck rank cannot
// be asked (it is stopped, hung or busy), so every rank writes the sequence number and name of each collective
// it enters into its slot of a small POSIX shared-memory table, one per process group and host; a timing-out
// rank reads the slots of the ranks on its host and reports who is behind, where, and whether that process is
// stopped. Writing is two stores per collective; nothing is exchanged through the group itself. Ranks on other
// hosts are not visible (their own host's table holds them).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace volt::dist {

class FlightRecorder {
 public:
  /// Opens (creating when needed) the table named after the group: `tag` (backend and group index, the same on
  /// every rank), rank 0's pid and host, and the world size. nullptr when shared memory is not available.
  static std::unique_ptr<FlightRecorder> open(const std::string& tag, int64_t rank0_pid, const std::string& rank0_host,
                                              int world_size, int rank, bool unlink_on_close);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  /// This rank entered collective `seq` named `op`.
  void record(uint64_t seq, const std::string& op);

  struct Entry {
    int64_t pid = 0;
    uint64_t seq = 0;  ///< 0: no collective entered yet
    std::string op;
  };
  /// Rank r's slot; nullopt when rank r never wrote to this host's table (another host).
  std::optional<Entry> read(int rank) const;

  /// The sentence a timeout of collective (`seq`, `op`) on `rank` adds: each visible rank's last collective and,
  /// when some are behind, which ones (rank, pid, host, process state). `hosts[r]` names rank r's host.
  std::string report(int rank, uint64_t seq, const std::vector<std::string>& hosts) const;

  /// One letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z' zombie, ...); '?' when unknown.
  static char process_state(int64_t pid);
  const std::string& name() const { return name_; }

 private:
  FlightRecorder() = default;
  struct Slot;
  std::string name_;
  int world_ = 0, rank_ = 0;
  bool unlink_ = false;
  void* map_ = nullptr;
  size_t bytes_ = 0;
  Slot* slots() const;
};

}  // namespace volt::dist
