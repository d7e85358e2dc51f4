#pragma once
/// @file
/// The Trainer (volt::Trainer, volt::TrainModule) and everything a training script configures around it:
/// options, callbacks (checkpointing, early stopping, progress bar, throughput), loggers, profiler, strategies,
/// precision plugins and checkpoint files.
#include <volt/trainer/callback.h>
#include <volt/trainer/checkpoint/record.h>
#include <volt/trainer/checkpoint/files.h>
#include <volt/trainer/loggers/csv_logger.h>
#include <volt/trainer/strategies/ddp.h>
#include <volt/trainer/strategies/device_parser.h>
#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/enums.h>
#include <volt/trainer/precision/grad_scaler.h>
#include <volt/trainer/loggers/logger.h>
#include <volt/trainer/manual_optimizer.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include <volt/trainer/model_summary.h>
#include <volt/trainer/strategies/node_layout.h>
#include <volt/trainer/precision/precision.h>
#include <volt/trainer/profilers/profiler.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/result_collection.h>
#include <volt/trainer/step_graph.h>
#include <volt/trainer/checkpoint/sharded.h>
#include <volt/trainer/strategies/strategy.h>
#include <volt/trainer/loggers/tensorboard_logger.h>
#include <volt/trainer/callbacks/throughput_monitor.h>
#include <volt/trainer/train_module.h>
#include <volt/trainer/trainer.h>
#include <volt/trainer/trainer_options.h>
#include <volt/trainer/strategies/zero.h>
#include <volt/data.h>
#include <volt/distributed.h>
#include <volt/nn.h>
