// Captured training steps under DDP (TrainerOptions::cuda_graphs, trainer/step_graph.h): one process is captured
// like a single device (its reducer reduces nothing, and its host bookkeeping runs whole at the capture); with
// several processes cuda_graphs=on is refused with the same error on every rank.
#include <gtest/gtest.h>

#include <string>

#include "common/ddp_test_util.h"
#include "common/error_message.h"
#include "common/step_graph_test_module.h"
#include <volt/distributed/process_group.h>

using namespace volt;
using namespace volt::test;

TEST(DdpStepGraph, OneProcessIsCapturedLikeSingleDeviceAndMoreAreRefused) {
  const int world = dist::default_group().world_size();
  ScratchDir dir("ddp_step_graph");  // per process
  manual_seed(11);
  GraphNet ddp;
  if (world > 1) {
    const std::string msg =
        volt::testing::message_of([&] { fit_two_epochs(ddp, dir.str(), "ddp", CudaGraphs::on, "ddp"); });
    EXPECT_NE(msg.find("cuda_graphs=on, but the training step cannot be captured"), std::string::npos) << msg;
    EXPECT_NE(msg.find("strategy \"ddp\" with " + std::to_string(world) + " process(es)"), std::string::npos) << msg;
    return;
  }
  manual_seed(11);
  GraphNet single;
  EXPECT_EQ(fit_two_epochs(single, dir.str(), "single", CudaGraphs::on, "single_device").replays, 8);
  EXPECT_EQ(fit_two_epochs(ddp, dir.str(), "ddp", CudaGraphs::on, "ddp").replays, 8);
  expect_same_dicts(ddp.named_parameters(), single.named_parameters());
  expect_same_dicts(ddp.opt->state_dict(), single.opt->state_dict());
}
