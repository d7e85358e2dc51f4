#pragma once
/// @file
/// Optimizers (volt::optim: SGD, Adam, AdamW, RMSprop, Adagrad, Lion), learning-rate schedulers and gradient
/// clipping.
#include <volt/nn/clip_grad.h>
#include <volt/nn/lr_scheduler.h>
#include <volt/nn/optim.h>
#include <volt/nn/optimizers.h>
