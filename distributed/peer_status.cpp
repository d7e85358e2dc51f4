#include <volt/distributed/peer_status.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include <volt/distributed/flight_recorder.h>

namespace volt::dist {
namespace {

std::mutex g_mutex;
std::vector<std::pair<const ProcessGroup*, std::weak_ptr<FlightRecorder>>> g_recorders;

std::shared_ptr<FlightRecorder> recorder_of(const ProcessGroup& g) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [group, rec] : g_recorders)
    if (group == &g) return rec.lock();
  return nullptr;
}

std::string describe(const std::optional<FlightRecorder::Entry>& e) {
  if (!e) return "unknown";
  if (!e->seq) return "none";
  std::string s = "#";  // appended, not "#" + ...: GCC 12 warns falsely (-Wrestrict) about the temporaries
  s += std::to_string(e->seq);
  s += ' ';
  s += e->op;
  return s;
}

}  // namespace

namespace detail {
void remember_flight_recorder(const ProcessGroup* g, const std::shared_ptr<FlightRecorder>& recorder) {
  std::lock_guard<std::mutex> lock(g_mutex);
  // Groups that are gone leave expired entries; a new group may reuse an old one's address.
  g_recorders.erase(std::remove_if(g_recorders.begin(), g_recorders.end(),
                                   [&](const auto& e) { return e.first == g || e.second.expired(); }),
                    g_recorders.end());
  if (recorder) g_recorders.emplace_back(g, recorder);
}
}  // namespace detail

std::vector<std::string> stopped_peers(const ProcessGroup& g) {
  std::vector<std::string> out;
  const auto rec = recorder_of(g);
  if (!rec || g.peers().size() != static_cast<size_t>(g.world_size())) return out;
  for (int r = 0; r < g.world_size(); ++r) {
    if (r == g.rank()) continue;
    const auto e = rec->read(r);
    if (!e || e->pid != g.peers()[r].pid) continue;  // another host's rank, or not this group's process
    const char state = FlightRecorder::process_state(e->pid);
    if (state != 'T' && state != 't') continue;
    out.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(e->pid) + " on " + g.peers()[r].host +
                  ", process stopped, last collective " + describe(e) + ")");
  }
  return out;
}

std::string last_collective(const ProcessGroup& g) {
  const auto rec = recorder_of(g);
  return rec ? describe(rec->read(g.rank())) : "unknown";
}

std::string flight_recorder_report(const ProcessGroup& g, uint64_t seq) {
  const auto rec = recorder_of(g);
  return rec ? rec->report(g.rank(), seq, g.hosts()) : "";
}

}  // namespace volt::dist
