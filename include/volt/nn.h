#pragma once
/// @file
/// Neural-network building blocks in volt::nn (modules, layers, init, functional ops, metrics, safetensors
/// files), with the optimizers and learning-rate schedulers of volt::optim.
#include <volt/kernels/layer_ops.h>
#include <volt/nn/layers/adaptive_pool.h>
#include <volt/nn/layers/containers.h>
#include <volt/nn/layers/conv1d.h>
#include <volt/nn/layers/conv_transpose.h>
#include <volt/nn/layers/rnn.h>
#include <volt/nn/layers/upsample.h>
#include <volt/nn/losses.h>
#include <volt/nn/nn.h>
#include <volt/tensor.h>
