// distributed/peer_status.h: a stopped peer is named with its pid, host and last collective, read from the
// flight recorder without anything from the stopped process. Each rank forks its own two-rank group (itself as
// rank 0, the child as rank 1) of a host-only fake backend, so the test holds at any world size.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <volt/distributed/peer_status.h>
#include <volt/distributed/process_group.h>
#include <volt/distributed/work_util.h>

using namespace volt;
using namespace volt::dist;

namespace {

// Collectives that complete at once on the host (only their sequence numbers and the flight recorder matter).
class FakeGroup final : public ProcessGroup {
 public:
  FakeGroup(int rank, std::vector<PeerIdentity> peers) : ProcessGroup(rank, 2, rank, 2) { set_peers(std::move(peers)); }
  std::string backend_name() const override { return "fake"; }
  void local_barrier() override {}

 protected:
  bool supports_device(Device d) const override { return d.is_cpu(); }
  std::shared_ptr<Work> all_reduce_impl(Tensor&, ReduceOp, const CollectiveInfo& i) override { return done(i); }
  std::shared_ptr<Work> broadcast_impl(Tensor&, int, const CollectiveInfo& i) override { return done(i); }
  std::shared_ptr<Work> all_gather_impl(const Tensor&, Tensor&, const CollectiveInfo& i) override { return done(i); }
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor&, Tensor&, ReduceOp, const CollectiveInfo& i) override {
    return done(i);
  }
  std::shared_ptr<Work> barrier_impl(const CollectiveInfo& i) override { return done(i); }
  // Every rank's record, as the debug checks (VOLT_DISTRIBUTED_DEBUG) expect: here each rank is taken to have
  // called exactly what this one did.
  std::vector<int64_t> exchange_records(const std::vector<int64_t>& mine, const CollectiveInfo&) override {
    std::vector<int64_t> all;
    for (int r = 0; r < 2; ++r) all.insert(all.end(), mine.begin(), mine.end());
    return all;
  }

 private:
  static std::shared_ptr<Work> done(const CollectiveInfo& i) { return std::make_shared<DoneWork>(i); }
};

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

TEST(PeerStatus, AStoppedPeerIsNamedWithItsLastCollective) {
  const pid_t parent = ::getpid();
  const std::string me = host();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 1: the same group (same creation index as the parent's, forked from the same state), one barrier,
    // then stop, as a hung or debugger-held rank would. Killed by the parent; never returns to the test runner.
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(3);
    FakeGroup g(1, {{parent, me}, {::getpid(), me}});
    g.barrier();
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  FakeGroup g(0, {{parent, me}, {child, me}});
  (void)!::write(go[1], "x", 1);
  g.barrier();
  g.barrier();
  EXPECT_EQ(last_collective(g), "#2 barrier");
  std::vector<std::string> stopped;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((stopped = stopped_peers(g)).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0], "rank 1 (pid " + std::to_string(child) + " on " + me +
                            ", process stopped, last collective #1 barrier)");
  const std::string report = flight_recorder_report(g, 3);
  EXPECT_NE(report.find("Stuck: rank 1 (pid " + std::to_string(child) + " on " + me +
                        ", process stopped) whose last collective is #1 barrier; this rank waits in #3"),
            std::string::npos)
      << report;
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // Gone is not stopped (missing_peers() names an exited rank).
  EXPECT_TRUE(stopped_peers(g).empty());
  ::close(go[0]);
  ::close(go[1]);
}

TEST(PeerStatus, ARunningPeerOrAGroupWithoutRecorderIsNotStopped) {
  EXPECT_TRUE(stopped_peers(default_group()).empty());  // every rank of the test job runs
  // One rank: no flight recorder at all.
  auto single = make_single_group();
  EXPECT_TRUE(stopped_peers(*single).empty());
  EXPECT_EQ(last_collective(*single), "unknown");
  EXPECT_EQ(flight_recorder_report(*single, 1), "");
}
