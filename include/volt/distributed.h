#pragma once
/// @file
/// Collectives in volt::dist: process groups (single process, MPI on CPU ranks, NCCL on GPU ranks), the DDP
/// gradient reducer, tensors shared between processes, and process spawning.
#include <volt/distributed/grad_reducer.h>
#include <volt/distributed/process_group.h>
#include <volt/distributed/sharded_reducer.h>
#include <volt/distributed/shared_tensor.h>
#include <volt/distributed/spawn.h>
