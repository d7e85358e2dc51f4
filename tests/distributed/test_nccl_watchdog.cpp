// The NCCL backend's wait rule (distributed/nccl_watchdog.h) with fake status callbacks and a fake clock: what
// every non-blocking NCCL wait (communicator creation, enqueue, completion, barrier, teardown) decides, run on any
// machine. The same rule on a real GPU: test_nccl_cuda.cpp.
#include <gtest/gtest.h>

#include <string>

#include <volt/distributed/nccl_watchdog.h>

using namespace volt::dist;
using nccl_watchdog::Outcome;

namespace {

// Time advances only when the watch pauses: each pause is `step` seconds.
struct FakeClock {
  double t = 100.0, step = 0.01;
  int pauses = 0;
  nccl_watchdog::Clock clock() {
    return {[this] { return t; }, [this](int n) {
              EXPECT_EQ(n, pauses);  // re-polls are numbered 0, 1, 2, ...
              ++pauses;
              t += step;
            }};
  }
};

// A fake NCCL operation: done after `done_after` looks, an error from look `error_at` on (-1: never).
struct FakeOp {
  int done_after = 0, error_at = -1;
  int done_looks = 0, error_looks = 0, aborts = 0;
  std::string error = "remote process exited or there was a network error";
  nccl_watchdog::Probes probes() {
    return {[this] { return done_looks++ >= done_after; },
            [this] { return error_looks++ >= error_at && error_at >= 0 ? error : std::string(); }};
  }
  std::function<void()> abort() {
    return [this] { ++aborts; };
  }
};

}  // namespace

TEST(NcclWatchdog, DoneAtOnceNeverAborts) {
  FakeClock c;
  FakeOp op;
  const Outcome o = nccl_watchdog::watch(op.probes(), 5.0, op.abort(), c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::Done);
  EXPECT_FALSE(o.aborted);
  EXPECT_EQ(op.aborts, 0);
  EXPECT_EQ(c.pauses, 0);
  EXPECT_DOUBLE_EQ(o.elapsed_s, 0.0);
  EXPECT_TRUE(o.error.empty());
}

TEST(NcclWatchdog, DoneAfterPollsWithinTheTimeout) {
  FakeClock c;
  FakeOp op;
  op.done_after = 40;  // 0.4 s of fake time, timeout 5 s
  const Outcome o = nccl_watchdog::watch(op.probes(), 5.0, op.abort(), c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::Done);
  EXPECT_EQ(op.aborts, 0);
  EXPECT_EQ(op.done_looks, 41);
  EXPECT_EQ(op.error_looks, 41) << "the error is looked at before every completion check";
  EXPECT_EQ(c.pauses, 40);
  EXPECT_NEAR(o.elapsed_s, 0.4, 1e-9);
}

TEST(NcclWatchdog, TimeoutAbortsOnceAndStopsPolling) {
  FakeClock c;
  FakeOp op;
  op.done_after = 1 << 30;  // a peer that never comes
  const Outcome o = nccl_watchdog::watch(op.probes(), 2.0, op.abort(), c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::TimedOut);
  EXPECT_TRUE(o.aborted);
  EXPECT_EQ(op.aborts, 1);
  EXPECT_NEAR(o.elapsed_s, 2.0, 0.011);
  EXPECT_GE(o.elapsed_s, 2.0);
  EXPECT_NEAR(c.pauses, 200, 1);
  EXPECT_EQ(op.done_looks, c.pauses + 1) << "no look after the decision";
  EXPECT_TRUE(o.error.empty());
}

TEST(NcclWatchdog, AsyncErrorAbortsAtOnceWithNcclsText) {
  FakeClock c;
  FakeOp op;
  op.done_after = 1 << 30;  // the collective hangs on a dead peer ...
  op.error_at = 7;          // ... until NCCL notices the closed connection
  const Outcome o = nccl_watchdog::watch(op.probes(), 300.0, op.abort(), c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::Failed);
  EXPECT_EQ(o.error, op.error);
  EXPECT_EQ(op.aborts, 1);
  EXPECT_EQ(c.pauses, 7);
  EXPECT_NEAR(o.elapsed_s, 0.07, 1e-9);
}

TEST(NcclWatchdog, AnErrorWinsOverCompletion) {
  // The event fired, but NCCL reports the communicator failed: its result cannot be trusted.
  FakeClock c;
  FakeOp op;
  op.error_at = 0;
  const Outcome o = nccl_watchdog::watch(op.probes(), 300.0, op.abort(), c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::Failed);
  EXPECT_EQ(op.aborts, 1);
  EXPECT_EQ(op.done_looks, 0);
}

TEST(NcclWatchdog, ASpentTimeoutStillLooksOnce) {
  FakeClock c;
  FakeOp done;
  EXPECT_EQ(nccl_watchdog::watch(done.probes(), 0.0, done.abort(), c.clock()).kind, Outcome::Kind::Done);
  EXPECT_EQ(done.aborts, 0);
  FakeOp pending;
  pending.done_after = 1;
  const Outcome o = nccl_watchdog::watch(pending.probes(), 0.0, pending.abort(), c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::TimedOut);
  EXPECT_EQ(pending.done_looks, 1);
  EXPECT_EQ(pending.aborts, 1);
}

TEST(NcclWatchdog, NoErrorProbeAndNoAbortCallback) {
  // Both are optional: a watch of a bare completion still times out (and says it aborted nothing else).
  FakeClock c;
  int looks = 0;
  const Outcome o = nccl_watchdog::watch({[&] { return ++looks > 3; }, nullptr}, 1.0, nullptr, c.clock());
  EXPECT_EQ(o.kind, Outcome::Kind::Done);
  EXPECT_EQ(looks, 4);
  FakeClock c2;
  const Outcome t = nccl_watchdog::watch({[] { return false; }, nullptr}, 0.05, nullptr, c2.clock());
  EXPECT_EQ(t.kind, Outcome::Kind::TimedOut);
}

TEST(NcclWatchdog, TheRealClockTimesOut) {
  FakeOp op;
  op.done_after = 1 << 30;
  const Outcome o = nccl_watchdog::watch(op.probes(), 0.05, op.abort());
  EXPECT_EQ(o.kind, Outcome::Kind::TimedOut);
  EXPECT_GE(o.elapsed_s, 0.05);
  EXPECT_LT(o.elapsed_s, 2.0);
  EXPECT_EQ(op.aborts, 1);
}

TEST(NcclWatchdog, FailureMessageNamesTheCollectiveTheRankAndWhoIsMissing) {
  const std::string m = nccl_watchdog::failure_message(
      CollectiveInfo{"all_reduce", 7}, 1, 3, "remote process exited or there was a network error",
      "Missing: rank 2 (pid 4242 on node7) has exited.");
  EXPECT_EQ(m,
            "collective all_reduce (sequence #7) failed on rank 1 of 3: NCCL error: remote process exited or there "
            "was a network error (reported by ncclCommGetAsyncError: a peer rank may have died or its network "
            "failed); the NCCL communicator was aborted. Missing: rank 2 (pid 4242 on node7) has exited. The "
            "process group is now unusable: exit the process.");
  const std::string bare = nccl_watchdog::failure_message(CollectiveInfo{"barrier", 1}, 0, 2, "unhandled", "");
  EXPECT_NE(bare.find("aborted. The process group is now unusable"), std::string::npos) << bare;
}
