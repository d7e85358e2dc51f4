#pragma once
/// @file
/// Activation recomputation for GPT-2's blocks. With it on, GPT2::forward keeps, for each block, only the
/// block's input (B, T, C) while gradients are recorded, and backward runs the block again
/// (nn::recompute, `volt/nn/recompute.h`): the activations of a whole block (attention, qkv, the 4C-wide MLP
/// hidden layer, LayerNorm statistics) live for one block at a time instead of for all n_layer blocks, for about
/// one more forward pass of compute. Gradients are the same, bit for bit on the CPU.
///
/// @code
///   nn::GPT2 model(nn::gpt2_config("350M"));
///   nn::set_recompute(model, true);
/// @endcode
/// Under DDP and FSDP (one unit, or a unit per block with --fsdp-wrap) the trained weights are the same bit for
/// bit with and without it (CPU, scripts/check_gpt2_ddp.sh); under FSDP a recomputed unit gathers its
/// parameters again for the recomputation.
#include <volt/nn/models/gpt2.h>

namespace volt::nn {

/// Turns recomputation of every block of `model` on or off (off when a model is built). Takes effect at the
/// next forward.
void set_recompute(GPT2& model, bool on);
bool recompute_enabled(const GPT2& model);

}  // namespace volt::nn
