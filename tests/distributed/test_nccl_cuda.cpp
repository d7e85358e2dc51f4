// The NCCL backend's non-blocking communicator on a real GPU (skipped, with the reason, without one): collectives
// on a communicator made with config.blocking = 0 and watched on the host, and a creation whose peer never
// arrives, which must time out and abort instead of hanging in NCCL. scripts/gpu_check.sh runs these
// (NcclWatchdogCuda.*, one rank under orterun).
#include <gtest/gtest.h>

#include <volt/config.h>
#include <volt/distributed/process_group.h>
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

#if VOLT_WITH_CUDA
#include <chrono>

#include <volt/distributed/nccl_comm.h>
#endif

using namespace volt;

namespace {
// Empty when the GPU tests can run here, else why not (printed by the skip).
std::string why_not_gpu() {
#if !VOLT_WITH_CUDA
  return "Volt was built without CUDA";
#else
  if (!cuda_available()) return "no usable GPU: " + cuda_status();
  return "";
#endif
}
}  // namespace

TEST(NcclWatchdogCuda, CollectivesOnANonBlockingCommunicator) {
  if (const std::string why = why_not_gpu(); !why.empty()) GTEST_SKIP() << why;
  // One GPU per rank: a job of more ranks than this host has GPUs is refused by the backend (tested elsewhere).
  if (dist::default_group().world_size() > cuda_device_count())
    GTEST_SKIP() << dist::default_group().world_size() << " ranks but " << cuda_device_count() << " GPU(s)";
  auto pg = dist::make_nccl_group();
  pg->set_timeout(60);
  const int r = pg->rank(), w = pg->world_size();
  const Device gpu = dist::device_for_local_rank(pg->local_rank());
  Tensor t = full({1000}, r + 1.0).to(gpu);
  pg->all_reduce(t);  // creates the communicator (non-blocking, watched), then the watched collective
  for (double x : t.to(kCPU).to_vector<double>()) ASSERT_DOUBLE_EQ(x, w * (w + 1) / 2.0);
  Tensor b = full({7}, r * 10.0 + 3).to(gpu);
  pg->broadcast(b, 0);
  for (double x : b.to(kCPU).to_vector<double>()) ASSERT_DOUBLE_EQ(x, 3.0);
  auto work = pg->all_reduce_async(t, dist::ReduceOp::Max);
  work->wait();
  pg->barrier();  // polls both streams with the timeout instead of synchronising them
  for (double x : t.to(kCPU).to_vector<double>()) ASSERT_DOUBLE_EQ(x, w * (w + 1) / 2.0);
  EXPECT_FALSE(pg->broken());
  // pg goes out of scope: ncclCommFinalize, watched, then ncclCommDestroy.
}

TEST(NcclWatchdogCuda, CreationWhosePeerNeverArrivesTimesOutAndAborts) {
  if (const std::string why = why_not_gpu(); !why.empty()) GTEST_SKIP() << why;
#if VOLT_WITH_CUDA
  // Rank 0 of a two-rank communicator whose rank 1 never comes (a peer that died before NCCL started):
  // ncclCommInitRankConfig returns ncclInProgress and would wait forever; the watch gives up after 2 s and
  // aborts it.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  dist::nccl_watchdog::Outcome seen;
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::nccl_watchdog::init_comm(0, 2, id, 0, 2.0, [&](const dist::nccl_watchdog::Outcome& o) {
      seen = o;
      return std::string("rank 1 never joined");
    });
    FAIL() << "the communicator was created without its second rank";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 never joined"), std::string::npos) << e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(seen.kind, dist::nccl_watchdog::Outcome::Kind::TimedOut) << seen.error;
  EXPECT_TRUE(seen.aborted);
  EXPECT_GE(seen.elapsed_s, 2.0);
  EXPECT_LT(took, 30.0) << "ncclCommAbort of the half-made communicator took " << took - seen.elapsed_s << " s";
  std::printf("NcclWatchdogCuda: creation timed out after %.2f s; aborted, returned after %.2f s\n", seen.elapsed_s,
              took);
#endif
}
