#pragma once
/// @file
/// The Trainer (volt::Trainer, volt::TrainModule) and everything a training script configures around it:
/// options, callbacks (checkpointing, early stopping, progress bar, throughput), loggers, profiler, strategies,
/// precision plugins and checkpoint files.
#include <volt/trainer/callback.h>
#include <volt/trainer/checkpoint.h>
#include <volt/trainer/checkpoint_files.h>
#include <volt/trainer/csv_logger.h>
#include <volt/trainer/ddp_strategy.h>
#include <volt/trainer/device_parser.h>
#include <volt/trainer/early_stopping.h>
#include <volt/trainer/enums.h>
#include <volt/trainer/grad_scaler.h>
#include <volt/trainer/logger.h>
#include <volt/trainer/manual_optimizer.h>
#include <volt/trainer/model_checkpoint.h>
#include <volt/trainer/model_summary.h>
#include <volt/trainer/node_layout.h>
#include <volt/trainer/precision.h>
#include <volt/trainer/profiler.h>
#include <volt/trainer/progress_bar.h>
#include <volt/trainer/result_collection.h>
#include <volt/trainer/step_graph.h>
#include <volt/trainer/sharded_checkpoint.h>
#include <volt/trainer/strategy.h>
#include <volt/trainer/tensorboard_logger.h>
#include <volt/trainer/throughput_monitor.h>
#include <volt/trainer/train_module.h>
#include <volt/trainer/trainer.h>
#include <volt/trainer/trainer_options.h>
#include <volt/trainer/zero_strategy.h>
#include <volt/data.h>
#include <volt/distributed.h>
#include <volt/nn.h>
