#pragma once
/// @file
/// Neural-network building blocks in volt::nn (modules, layers, init, functional ops, metrics, safetensors
/// files), with the optimizers and learning-rate schedulers of volt::optim.
#include <volt/nn/nn.h>
#include <volt/tensor.h>
